/** Messages between an onnx engine instance and its session's worker thread (onnx-thread.ts). */

export interface ThreadTensor {
  name: string;
  /** ONNX Runtime's element type name: float32, int64, bool, ... */
  type: string;
  dims: number[];
  data: Uint8Array;
}

export interface GraphValue {
  name: string;
  /** Absent for values that are not tensors (sequences, maps). */
  type?: string;
  /** Fixed sizes, or names of symbolic dimensions. */
  shape?: (number | string)[];
}

export type ToThread = { kind: 'run'; id: number; inputs: ThreadTensor[] } | { kind: 'close' };

export type FromThread =
  | { kind: 'ready'; inputs: GraphValue[]; outputs: GraphValue[]; runtime: string }
  | { kind: 'failed'; message: string }
  | { kind: 'result'; id: number; outputs: ThreadTensor[]; computeMs: number }
  | { kind: 'error'; id: number; message: string };

/** What a thread is started with (its workerData). */
export interface ThreadOptions {
  file: string;
  threads: number;
  /** SessionOptions.graphOptimizationLevel: config.json's optimization.onnx_graph. */
  graphOptimization: 'disabled' | 'basic' | 'extended' | 'all';
}
