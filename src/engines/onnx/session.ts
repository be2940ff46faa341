import ort from 'onnxruntime-node';
import type { DType } from '../../tensor/dtype.js';
import { typedView } from '../../tensor/tensor.js';
import type { ThreadOptions, ThreadTensor } from './protocol.js';

/**
 * One ONNX Runtime session, and the tensors in and out of it, as both places that run one use
 * them: a session's worker thread (onnx-thread.ts) and, for graphs too small to be worth a
 * thread hop, the gateway's own thread (onnx-engine.ts).
 */

export type Session = ort.InferenceSession;

export function openSession({ file, threads, graphOptimization }: ThreadOptions): Promise<Session> {
  return ort.InferenceSession.create(file, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: graphOptimization,
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
  });
}

export const runtimeVersion = (): string => `onnxruntime ${ort.env.versions.common}`;

/** One forward pass; the outputs are views over ONNX Runtime's own buffers, with no copy. */
export async function runSession(
  session: Session,
  inputs: readonly ThreadTensor[],
): Promise<{ outputs: ThreadTensor[]; computeMs: number }> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const t of inputs) feeds[t.name] = new ort.Tensor(t.type as ort.Tensor.Type, ortData(t), t.dims);
  const start = performance.now();
  const results = await session.run(feeds);
  const computeMs = performance.now() - start;
  const outputs: ThreadTensor[] = [];
  for (const [name, tensor] of Object.entries(results)) {
    const data = tensor.data as ArrayBufferView;
    outputs.push({
      name,
      type: tensor.type,
      dims: [...tensor.dims],
      data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    });
  }
  return { outputs, computeMs };
}

/**
 * The typed array ONNX Runtime takes for an element type, over the bytes that came in. Every type
 * ONNX Runtime runs here has the same name as tensorgate's dtype (onnx-engine.ts maps them), and
 * the same array: float16 as its Uint16 bits, bool as Uint8.
 */
function ortData(t: ThreadTensor): ort.Tensor.DataType {
  return typedView({ dtype: t.type as DType, shape: t.dims, data: t.data }) as ort.Tensor.DataType;
}
