import { parentPort, workerData } from 'node:worker_threads';
import type ort from 'onnxruntime-node';
import type { FromThread, ThreadOptions, ToThread } from './protocol.js';
import { openSession, runSession, runtimeVersion, type Session } from './session.js';

/**
 * One ONNX Runtime session in a worker thread of the gateway. onnxruntime-node's `run` computes
 * on the calling thread (its promise only defers the call), so the session lives here, where its
 * compute blocks nothing else. Inputs arrive as buffers of their own, moved here without a copy;
 * outputs go back the same way.
 */

const port = parentPort;
if (!port) throw new Error('onnx-thread runs as a worker thread');

function post(message: FromThread, transfer: ArrayBuffer[] = []): void {
  (port as NonNullable<typeof parentPort>).postMessage(message, transfer);
}

const metadata = (values: readonly ort.InferenceSession.ValueMetadata[]) =>
  values.map((m) => (m.isTensor ? { name: m.name, type: m.type, shape: [...m.shape] } : { name: m.name }));

let session: Session;
try {
  session = await openSession(workerData as ThreadOptions);
  post({
    kind: 'ready',
    inputs: metadata(session.inputMetadata),
    outputs: metadata(session.outputMetadata),
    runtime: runtimeVersion(),
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
    const { outputs, computeMs } = await runSession(session, inputs);
    // An output that is a whole buffer of its own moves back without a copy.
    const transfer = outputs
      .filter(({ data }) => data.byteOffset === 0 && data.byteLength === data.buffer.byteLength)
      .map(({ data }) => data.buffer as ArrayBuffer);
    post({ kind: 'result', id, outputs, computeMs }, transfer);
  } catch (err) {
    post({ kind: 'error', id, message: (err as Error).message });
  }
});
