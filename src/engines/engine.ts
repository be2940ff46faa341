import type { ModelConfig, Precision } from '../registry/model-config.js';
import type { TensorSource } from '../tensor/source.js';
import type { Tensor } from '../tensor/tensor.js';

/**
 * What the scheduler needs from an engine: instances of one model version that run requests.
 * The torch engine's instances are Python worker processes; other engines (onnx, remote) plug in here.
 */

export interface NamedTensor {
  name: string;
  tensor: Tensor;
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
}

/** Milliseconds spent per stage inside the engine, as measured on both sides of the IPC boundary. */
export interface EngineTimings {
  /** Decoding or reading input bytes into their destination (deferred from the request decode). */
  fillMs: number;
  transferMs: number;
  computeMs: number;
}

export interface EngineResponse {
  outputs: NamedTensor[];
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
  max_abs?: number;
  max_rel?: number;
  tolerance?: number;
  /** The output with the largest error. */
  output?: string;
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
