import type { ModelConfig, Precision } from '../registry/model-config.js';
import type { AccuracyRule } from '../tensor/compare.js';
import type { SinkRows, TensorSource } from '../tensor/source.js';
import type { Tensor } from '../tensor/tensor.js';

/**
 * What the scheduler needs from an engine: instances of one model version that run requests.
 * The torch engine's instances are Python worker processes; other engines (onnx, remote) plug in here.
 */

export interface NamedTensor {
  name: string;
  tensor: Tensor;
  /**
   * Every row went to the request's output sinks (EngineRequest.sinks): `tensor.data` is empty,
   * the bytes are where the sinks point.
   */
  written?: true;
}

/** An input whose bytes the engine writes straight to where its runtime reads them. */
export interface NamedInput {
  name: string;
  tensor: TensorSource;
}

export interface EngineRequest {
  /** Inputs in the order the model declares them. */
  inputs: NamedInput[];
  precision: Precision;
  /** Files the caller wants outputs written into; an engine may, or leave them to the caller. */
  sinks?: readonly SinkRows[];
}

/** Milliseconds spent per stage inside the engine, as measured on both sides of the IPC boundary. */
export interface EngineTimings {
  /** Decoding or reading input bytes into their destination (deferred from the request decode). */
  fillMs: number;
  transferMs: number;
  computeMs: number;
  /** Decoding and transforming processed inputs (images) into the model's tensors, in the worker. */
  preprocessMs?: number;
  /** A processing handler's postprocess, in the worker. */
  postprocessMs?: number;
}

/**
 * Where an image item's model-input pixels lie in the image as it was sent (upright): the
 * model-input point (x, y) is ((x + left) * scale_x, (y + top) * scale_y) there.
 */
export interface ImageGeometry {
  width: number;
  height: number;
  input_width: number;
  input_height: number;
  left: number;
  top: number;
  scale_x: number;
  scale_y: number;
}

export interface EngineResponse {
  outputs: NamedTensor[];
  /** A processing handler's answers, one per row. */
  answers?: unknown[];
  /** Models with a detection output: each image input's geometry, one per row. */
  geometry?: Record<string, ImageGeometry[]>;
  timings: EngineTimings;
}

/**
 * One way a model version runs: a precision on an engine, prepared by `method`, and what its check
 * against plain fp32 found. `rejected` (past its tolerance) and `unavailable` (cannot be built
 * here) variants say why; requests for them are answered VARIANT_UNAVAILABLE.
 */
export interface VariantReport {
  precision: Precision;
  engine: string;
  method: string;
  state: 'ready' | 'rejected' | 'unavailable';
  reason?: string;
  /** The output furthest from fp32 on the check inputs, by the rule for its kind (src/tensor/compare.ts). */
  output?: string;
  rule?: AccuracyRule;
  /** That output's error: scaled to its range or spread (classes, values), or the share of elements that differ (exact). */
  error?: number;
  max_abs?: number;
  /** Rows whose top class changed (classes) or elements that differ (exact). */
  changed?: number;
  /** Rows (classes) or elements compared. */
  compared?: number;
  tolerance?: number;
  /** Milliseconds spent building it (transform or compilation, check, warm-up). */
  build_ms?: number;
  /** For compiled packages: found in the compile cache rather than compiled at this load. */
  cached?: boolean;
  /** Median milliseconds of a one-row request through the variant's queue and engine, measured after loading. */
  latency_ms?: number;
}

export interface LoadInfo {
  device: string;
  loadMs: number;
  warmupMs: number;
  /** Bytes of parameters and buffers the instance holds. */
  weightsBytes: number;
  runtime: string;
  /** The variants this instance built (torch: one per offered precision; onnx: fp32). */
  variants: VariantReport[];
}

export interface EngineInstance {
  readonly label: string;
  /** The process serving it, when it is one (for monitoring and fault tests). */
  readonly pid?: number;
  /**
   * Requests (or batches) the instance may hold at once; 1 when unset. Above 1, the pool sends the
   * next one while the instance is still running the last, so it finds its next work waiting when
   * it answers instead of waiting a round trip for the gateway; it still runs them one at a time,
   * in order, and answers them in that order.
   */
  readonly pipelineDepth?: number;
  start(): Promise<LoadInfo>;
  infer(request: EngineRequest): Promise<EngineResponse>;
  /** Resolves when the instance died on its own (crash), never when closed on purpose. */
  onCrash(listener: (err: Error) => void): void;
  close(): Promise<void>;
}

export interface ModelVersionSpec {
  config: ModelConfig;
  version: string;
  dir: string;
}

export interface Engine {
  readonly name: string;
  createInstance(spec: ModelVersionSpec, index: number): EngineInstance;
}
