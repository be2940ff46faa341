import { z } from 'zod';
import { tgError } from '../../errors.js';
import { type ModelConfig, PRECISIONS } from '../../registry/model-config.js';
import { type ProcessingConfig, workerProcessing } from '../../registry/processing.js';
import { versionDir, versionFile } from '../../registry/repository.js';
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
  /** A BYTES input (shape [items]): length-prefixed items for the model's processing to decode. */
  bytes: z.literal(true).optional(),
});
export type TensorHeader = z.infer<typeof TensorHeaderSchema>;

/**
 * Bytes the worker reads into the input arena itself before it views the inputs: `nbytes` at
 * `position` of the file at `path` (a `/proc/<gateway pid>/fd/<fd>` link the gateway holds open),
 * into `[offset, offset + nbytes)` of the arena. `what` names them in an error, and `code` is the
 * error when the file holds fewer bytes by then (default SHARED_MEMORY_OUT_OF_RANGE).
 */
export interface FileRead {
  offset: number;
  nbytes: number;
  path: string;
  position: number;
  what: string;
  code?: 'BAD_TENSOR' | 'SHARED_MEMORY_OUT_OF_RANGE';
}

/**
 * Output rows the worker copies from its output arena into a file itself after the forward pass:
 * rows `[row, row + rows)` (to the end without `rows`) of `output` go to `position` of the file at
 * `path` (as FileRead's) when they fit in `capacity` bytes. The answer's `written` lists the
 * writes done by index; one not done is left to the gateway.
 */
export interface FileWrite {
  output: string;
  row: number;
  rows?: number;
  path: string;
  position: number;
  capacity: number;
}

export const HelloSchema = z.object({
  op: z.literal('hello'),
  pid: z.number().int(),
  python: z.string(),
  torch: z.string(),
  cuda: z.boolean(),
  cuda_devices: z.number().int().default(0),
  formats: z.array(z.string()),
  /** Whether the worker can open the gateway's files through /proc (then it reads FileReads itself). */
  reads_files: z.boolean().default(false),
});
export type Hello = z.infer<typeof HelloSchema>;

export const WorkerErrorSchema = z.object({
  code: z.string(),
  message: z.string(),
  type: z.string().optional(),
});

/**
 * A reply's `result` is an object, checked no further here: the request's own schema
 * (`InferResultSchema`, `LoadResultSchema`) checks it, so walking and copying it as a record
 * first would be a second pass over every answer.
 */
const ResultObjectSchema = z.custom<Record<string, unknown>>(
  (value) => typeof value === 'object' && value !== null && !Array.isArray(value),
  'result must be an object',
);

export const ReplySchema = z.discriminatedUnion('ok', [
  z.object({ id: z.number().int(), ok: z.literal(true), result: ResultObjectSchema }),
  z.object({ id: z.number().int(), ok: z.literal(false), error: WorkerErrorSchema }),
]);
export type Reply = z.infer<typeof ReplySchema>;

export const LoadResultSchema = z.object({
  device: z.string(),
  /** How long the worker polls its channel after answering (0: it blocks at once). */
  spin_us: z.number().int().nonnegative().optional(),
  /** Whether the worker begins an arrived request before answering the one in flight (CUDA). */
  pipeline: z.boolean().optional(),
  /** The CPUs the worker runs on, when the load request placed it (`cpus`). */
  cpus: z.array(z.number().int().nonnegative()).optional(),
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
        output: z.string().optional(),
        rule: z.enum(['classes', 'values', 'exact']).optional(),
        // null where the error is not a finite number (a NaN in a rejected variant's outputs)
        error: z
          .number()
          .nullish()
          .transform((v) => v ?? undefined),
        max_abs: z
          .number()
          .nullish()
          .transform((v) => v ?? undefined),
        changed: z.number().int().optional(),
        compared: z.number().int().optional(),
        tolerance: z.number().optional(),
        build_ms: z.number().optional(),
        cached: z.boolean().optional(),
      }),
    )
    .default([]),
});
export type LoadResult = z.infer<typeof LoadResultSchema>;

export const InferResultSchema = z.object({
  outputs: z.array(TensorHeaderSchema),
  /** The request's FileWrites done, by index. */
  written: z.array(z.number().int().nonnegative()).optional(),
  /** A processing handler's postprocess: one JSON answer per row. */
  answers: z.array(z.unknown()).optional(),
  /** Models with a detection output: where each image item's model-input pixels lie in it. */
  geometry: z
    .record(
      z.string(),
      z.array(
        z.object({
          width: z.number(),
          height: z.number(),
          input_width: z.number(),
          input_height: z.number(),
          left: z.number(),
          top: z.number(),
          scale_x: z.number(),
          scale_y: z.number(),
        }),
      ),
    )
    .optional(),
  timings: z.object({
    h2d_ms: z.number(),
    compute_ms: z.number(),
    d2h_ms: z.number(),
    /** Decoding and transforming BYTES inputs (images) into the model's tensors. */
    preprocess_ms: z.number().optional(),
    /** A processing handler's postprocess. */
    postprocess_ms: z.number().optional(),
    /** Reading the request's FileReads into the input arena. */
    read_ms: z.number().optional(),
    /** Copying output rows into the request's FileWrites. */
    write_ms: z.number().optional(),
  }),
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
  outputs: { name: string; dtype: string; shape: number[]; labels?: string[] }[];
  warmup_runs: number;
  /** Rows one forward pass may get (batching.max_batch_size, else 1): exported programs must take them. */
  max_batch_size: number;
  /** Batch sizes a compiled variant is warmed up for, besides 1, 2 and the maximum. */
  preferred_batch_sizes: number[];
  /** How BYTES inputs become the model's tensors (the config's processing.inputs, or its handler). */
  processing?: { inputs: ProcessingConfig['inputs']; handler?: string; output?: ProcessingConfig['output'] };
}

/** The `model` object of a `load` request for one version of a model folder (also what the exporters take). */
export function loadRequestModel(config: ModelConfig, version: string, dir: string): LoadRequestModel {
  const v = config.versions[version];
  if (!v || v.format === 'remote' || v.format === 'onnx')
    throw tgError('INVALID_CONFIG', `version ${version} of ${config.name} is not a PyTorch model file`, {
      model: config.name,
      version,
    });
  return {
    name: config.name,
    version,
    format: v.format,
    file: versionFile(dir, version, v.file),
    code_dir: versionDir(dir, version),
    device: config.resources.device,
    threads: config.resources.threads,
    inputs: config.inputs.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
    // Labels make an output a set of classes, which the variants' checks judge by top class.
    outputs: config.outputs.map(({ name, dtype, shape, labels }) => ({
      name,
      dtype,
      shape,
      ...(labels ? { labels } : {}),
    })),
    warmup_runs: config.warmup_runs,
    max_batch_size: config.batching?.max_batch_size ?? 1,
    preferred_batch_sizes: config.batching?.preferred_batch_sizes ?? [],
    ...(v.entry ? { entry: v.entry } : {}),
    ...(config.processing
      ? {
          processing: {
            inputs: workerProcessing(config.processing, config.inputs),
            ...(config.processing.handler ? { handler: config.processing.handler } : {}),
            // Token ids are decoded in the worker, by the tokenizer file next to the model; for
            // detection boxes the worker reports where each image's model-input pixels lie in it.
            ...(config.processing.output?.type === 'text' || config.processing.output?.type === 'detection'
              ? { output: config.processing.output }
              : {}),
          },
        }
      : {}),
  };
}
