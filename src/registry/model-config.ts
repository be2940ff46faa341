import { z } from 'zod';
import { tgError } from '../errors.js';
import { DTYPES } from '../tensor/dtype.js';

/** The model repository's config.json (docs/model-repository.md is the prose form of this schema). */

export const TensorSpecSchema = z.object({
  name: z.string().regex(/^[A-Za-z_][A-Za-z0-9_.:-]*$/, 'tensor names are identifiers such as "image" or "input_ids"'),
  dtype: z.enum(DTYPES),
  shape: z.array(z.number().int().min(-1)).max(8),
  labels: z.array(z.string()).optional(),
  description: z.string().optional(),
});
export type TensorSpec = z.infer<typeof TensorSpecSchema>;

export const PRECISIONS = ['fp32', 'bf16', 'fp16'] as const;
export type Precision = (typeof PRECISIONS)[number];

export const MODEL_FORMATS = ['torchscript', 'export', 'eager'] as const;
export type ModelFormat = (typeof MODEL_FORMATS)[number];

export const VersionConfigSchema = z
  .object({
    format: z.enum(MODEL_FORMATS),
    file: z.string().min(1),
    entry: z
      .string()
      .regex(/^[A-Za-z_][\w.]*:[A-Za-z_]\w*$/, 'entry is "module:factory", e.g. "model:build"')
      .optional(),
  })
  .refine((v) => v.format !== 'eager' || v.entry !== undefined, {
    message: 'eager versions need an "entry" such as "model:build"',
  });
export type VersionConfig = z.infer<typeof VersionConfigSchema>;

export const ResourcesSchema = z.object({
  device: z
    .string()
    .regex(/^(cpu|auto|cuda(:\d+)?)$/, 'device is cpu, cuda, cuda:N or auto')
    .default('cpu'),
  threads: z.number().int().min(1).max(256).default(1),
  memory_mb: z.number().int().positive().optional(),
  instances: z.number().int().min(1).max(64).default(1),
});

export const ModelConfigSchema = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, 'model names are lower-case: letters, digits, ".", "_", "-"'),
    description: z.string().default(''),
    engine: z.literal('torch').default('torch'),
    default_version: z.string().optional(),
    inputs: z.array(TensorSpecSchema).min(1),
    outputs: z.array(TensorSpecSchema).min(1),
    parameters: z.object({ precision: z.array(z.enum(PRECISIONS)).default(['fp32']) }).default({ precision: ['fp32'] }),
    resources: ResourcesSchema.default({ device: 'cpu', threads: 1, instances: 1 }),
    versions: z.record(z.string().regex(/^\d+$/, 'versions are positive integers'), VersionConfigSchema),
    warmup_runs: z.number().int().min(0).max(100).default(2),
  })
  .superRefine((cfg, ctx) => {
    const versions = Object.keys(cfg.versions);
    if (versions.length === 0) ctx.addIssue({ code: 'custom', message: 'at least one version is needed' });
    if (cfg.default_version !== undefined && !versions.includes(cfg.default_version)) {
      ctx.addIssue({ code: 'custom', message: `default_version "${cfg.default_version}" is not in versions` });
    }
    for (const [kind, specs] of [
      ['input', cfg.inputs],
      ['output', cfg.outputs],
    ] as const) {
      const names = new Set<string>();
      for (const spec of specs) {
        if (names.has(spec.name)) ctx.addIssue({ code: 'custom', message: `duplicate ${kind} name "${spec.name}"` });
        names.add(spec.name);
      }
    }
  });
export type ModelConfig = z.infer<typeof ModelConfigSchema>;

/** Parses and validates a config, turning zod issues into one INVALID_CONFIG error that lists them all. */
export function parseModelConfig(raw: unknown, source: string): ModelConfig {
  const parsed = ModelConfigSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
  throw tgError('INVALID_CONFIG', `${source} is not a valid model config: ${issues.join('; ')}`, { source, issues });
}

/** The version a request gets when it names none: the configured default, else the highest number. */
export function defaultVersion(cfg: ModelConfig): string {
  if (cfg.default_version !== undefined) return cfg.default_version;
  const versions = Object.keys(cfg.versions).sort((a, b) => Number(a) - Number(b));
  return versions[versions.length - 1] as string;
}
