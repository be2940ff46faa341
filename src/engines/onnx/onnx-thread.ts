import { performance } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';
import ort from 'onnxruntime-node';
import type { FromThread, ThreadOptions, ThreadTensor, ToThread } from './protocol.js';

/**
 * One ONNX Runtime session in a worker thread of the gateway. onnxruntime-node's `run` computes
 * on the calling thread (its promise only defers the call), so the session lives here, where its
 * compute blocks nothing else. Inputs arrive as buffers of their own, moved here without a copy;
 * outputs go back the same way.
 */

const port = parentPort;
if (!port) throw new Error('onnx-thread runs as a worker thread');
const { file, threads, graphOptimization } = workerData as ThreadOptions;

function post(message: FromThread, transfer: ArrayBuffer[] = []): void {
  (port as NonNullable<typeof parentPort>).postMessage(message, transfer);
}

const metadata = (values: readonly ort.InferenceSession.ValueMetadata[]) =>
  values.map((m) => (m.isTensor ? { name: m.name, type: m.type, shape: [...m.shape] } : { name: m.name }));

let session: ort.InferenceSession;
try {
  session = await ort.InferenceSession.create(file, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: graphOptimization,
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
  });
  post({
    kind: 'ready',
    inputs: metadata(session.inputMetadata),
    outputs: metadata(session.outputMetadata),
    runtime: `onnxruntime ${ort.env.versions.common}`,
  });
} catch (err) {
  post({ kind: 'failed', message: (err as Error).message });
  process.exit(0);
}

port.on('message', async (message: ToThread) => {
  if (message.kind === 'close') {
    await session.release();
    port.close();
    return;
  }
  const { id, inputs } = message;
  try {
    const feeds: Record<string, ort.Tensor> = {};
    for (const t of inputs) feeds[t.name] = new ort.Tensor(t.type as ort.Tensor.Type, view(t), t.dims);
    const start = performance.now();
    const results = await session.run(feeds);
    const computeMs = performance.now() - start;
    const outputs: ThreadTensor[] = [];
    const transfer: ArrayBuffer[] = [];
    for (const [name, tensor] of Object.entries(results)) {
      const data = tensor.data as ArrayBufferView;
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      outputs.push({ name, type: tensor.type, dims: [...tensor.dims], data: bytes });
      if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength)
        transfer.push(bytes.buffer as ArrayBuffer);
    }
    post({ kind: 'result', id, outputs, computeMs }, transfer);
  } catch (err) {
    post({ kind: 'error', id, message: (err as Error).message });
  }
});

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
