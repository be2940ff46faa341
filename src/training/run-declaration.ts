import { z } from 'zod';
import { tgError } from '../errors.js';
import { MAX_HPARAMS, MAX_RANKS } from './run-file.js';

/** What a trainer declares at attach, as JSON in its run file's header (see tensorgate.train). */

export const HyperparameterSpecSchema = z.object({
  name: z.string().min(1).max(64),
  type: z.enum(['float', 'int', 'bool']),
  initial: z.union([z.number(), z.boolean()]),
  min: z.number().optional(),
  max: z.number().optional(),
});
export type HyperparameterSpec = z.infer<typeof HyperparameterSpecSchema>;

export const RunDeclarationSchema = z.object({
  run_id: z.string().min(1),
  name: z.string().min(1),
  pid: z.number().int().positive(),
  start_time: z.number().int().nonnegative(),
  host: z.string(),
  started_at: z.string(),
  world_size: z.number().int().min(1).max(MAX_RANKS),
  sync_every: z.number().int().positive(),
  scheduler: z.enum(['override', 'scale']),
  checkpoint: z.boolean(),
  hparams: z.array(HyperparameterSpecSchema).max(MAX_HPARAMS),
  sdk: z.string(),
  torch: z.string().nullable(),
});
export type RunDeclaration = z.infer<typeof RunDeclarationSchema>;

/** The number a value is stored as in the control block (bools as 0/1). */
export function encodeValue(value: number | boolean): number {
  return typeof value === 'boolean' ? Number(value) : value;
}

export function decodeValue(spec: HyperparameterSpec, stored: number): number | boolean {
  return spec.type === 'bool' ? stored !== 0 : stored;
}

/**
 * Checks one requested value against its declared spec and returns it as stored. The message
 * names the run, the hyperparameter, what was given and what is accepted.
 */
export function checkValue(runId: string, spec: HyperparameterSpec, value: unknown): number {
  const bad = (why: string) =>
    tgError('INVALID_HYPERPARAMETER', `run ${runId}: ${spec.name} ${why}`, {
      run: runId,
      hyperparameter: spec.name,
      given: typeof value === 'number' && !Number.isFinite(value) ? String(value) : value,
    });
  if (spec.type === 'bool') {
    if (typeof value !== 'boolean') throw bad(`takes true or false, got ${describe(value)}`);
    return Number(value);
  }
  if (typeof value !== 'number') throw bad(`takes a number (${spec.type}), got ${describe(value)}`);
  if (!Number.isFinite(value)) throw bad(`takes a finite number, got ${value}`);
  if (spec.type === 'int' && !Number.isInteger(value)) throw bad(`takes an integer, got ${value}`);
  const range = `${spec.min ?? '-inf'}..${spec.max ?? 'inf'}`;
  if ((spec.min !== undefined && value < spec.min) || (spec.max !== undefined && value > spec.max))
    throw bad(`must lie in the declared range ${range}, got ${value}`);
  return value;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.slice(0, 40))}`;
  return typeof value;
}
