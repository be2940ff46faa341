import ort from 'onnxruntime-node';
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
  for (const t of inputs) feeds[t.name] = new ort.Tensor(t.type as ort.Tensor.Type, view(t), t.dims);
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

/** The typed array ONNX Runtime takes for an element type, over the bytes that came in. */
function view(t: ThreadTensor): ort.Tensor.DataType {
  const { buffer, byteOffset, byteLength } = t.data;
  switch (t.type) {
    case 'float32':
      return new Float32Array(buffer, byteOffset, byteLength / 4);
    case 'float64':
      return new Float64Array(buffer, byteOffset, byteLength / 8);
    case 'float16':
      return new Uint16Array(buffer, byteOffset, byteLength / 2);
    case 'int8':
      return new Int8Array(buffer, byteOffset, byteLength);
    case 'int16':
      return new Int16Array(buffer, byteOffset, byteLength / 2);
    case 'int32':
      return new Int32Array(buffer, byteOffset, byteLength / 4);
    case 'int64':
      return new BigInt64Array(buffer, byteOffset, byteLength / 8);
    default:
      return new Uint8Array(buffer, byteOffset, byteLength); // uint8, bool
  }
}
