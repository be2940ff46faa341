import { z } from 'zod';
import { PRECISIONS } from '../../registry/model-config.js';
import { DTYPES } from '../../tensor/dtype.js';

/**
 * The gateway <-> worker contract (docs/worker-protocol.md). Every message the worker sends is
 * parsed with these schemas, so a worker speaking a different dialect fails loudly at the boundary.
 */

export const TensorHeaderSchema = z.object({
  name: z.string(),
  dtype: z.enum(DTYPES),
  shape: z.array(z.number().int().nonnegative()),
  offset: z.number().int().nonnegative(),
  nbytes: z.number().int().nonnegative(),
});
export type TensorHeader = z.infer<typeof TensorHeaderSchema>;

export const HelloSchema = z.object({
  op: z.literal('hello'),
  pid: z.number().int(),
  python: z.string(),
  torch: z.string(),
  cuda: z.boolean(),
  cuda_devices: z.number().int().default(0),
  formats: z.array(z.string()),
});
export type Hello = z.infer<typeof HelloSchema>;

export const WorkerErrorSchema = z.object({
  code: z.string(),
  message: z.string(),
  type: z.string().optional(),
});

export const ReplySchema = z.discriminatedUnion('ok', [
  z.object({ id: z.number().int(), ok: z.literal(true), result: z.record(z.string(), z.unknown()) }),
  z.object({ id: z.number().int(), ok: z.literal(false), error: WorkerErrorSchema }),
]);
export type Reply = z.infer<typeof ReplySchema>;

export const LoadResultSchema = z.object({
  device: z.string(),
  load_ms: z.number(),
  warmup_ms: z.number(),
  /** Parameters and buffers of the loaded model. */
  weights_bytes: z.number().int().nonnegative(),
  /** How each offered precision runs, and what its check against plain fp32 found. */
  variants: z
    .array(
      z.object({
        precision: z.enum(PRECISIONS),
        method: z.string(),
        state: z.enum(['ready', 'rejected', 'unavailable']),
        reason: z.string().optional(),
        max_abs: z.number().optional(),
        max_rel: z.number().optional(),
        tolerance: z.number().optional(),
        output: z.string().optional(),
      }),
    )
    .default([]),
});
export type LoadResult = z.infer<typeof LoadResultSchema>;

export const InferResultSchema = z.object({
  outputs: z.array(TensorHeaderSchema),
  timings: z.object({ h2d_ms: z.number(), compute_ms: z.number(), d2h_ms: z.number() }),
});
export type InferResult = z.infer<typeof InferResultSchema>;

export interface LoadRequestModel {
  name: string;
  version: string;
  format: string;
  file: string;
  entry?: string;
  code_dir: string;
  device: string;
  threads: number;
  inputs: { name: string; dtype: string; shape: number[] }[];
  outputs: { name: string; dtype: string; shape: number[] }[];
  warmup_runs: number;
}
