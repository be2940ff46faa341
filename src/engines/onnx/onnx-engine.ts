import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Worker } from 'node:worker_threads';
import { type TensorgateError, tgError } from '../../errors.js';
import type { TensorSpec } from '../../registry/model-config.js';
import { dtypeSize } from '../../tensor/dtype.js';
import { startModuleThread } from '../../threads.js';
import type {
  Engine,
  EngineInstance,
  EngineRequest,
  EngineResponse,
  LoadInfo,
  ModelVersionSpec,
  NamedTensor,
} from '../engine.js';
import { ORT_TYPES } from './ort-types.js';
import type { FromThread, GraphValue, ThreadOptions, ThreadTensor, ToThread } from './protocol.js';
import { openSession, runSession, type Session } from './session.js';

/**
 * The onnx engine: ONNX Runtime (onnxruntime-node) inside the gateway process, each instance a
 * session in a worker thread of its own. No process boundary and no IPC: an input is copied once,
 * into a buffer that then moves to the thread without a copy, and outputs move back the same way.
 * The thread matters because onnxruntime-node computes on the thread that calls `run`; in the
 * main thread every forward pass would stall every other request. `resources.threads` is each
 * session's intra-op thread count and `resources.instances` the sessions run at once, behind the
 * same scheduler as any engine (batching, queue limits, timeouts, metrics).
 *
 * Except for graphs too small to be worth the hop. Handing a pass to the thread and back costs
 * two thread wake-ups, tens of microseconds, which for a small tabular model is several times its
 * compute. So after warm-up the instance times a pass of a full batch in its thread; when that
 * takes under INLINE_MAX_MS, it opens a second session on the gateway's thread and runs passes no
 * larger than that one there, where they block the event loop less than parsing a request body
 * does. Larger passes still go to the thread. bench/engines measures the difference.
 */

/** A full batch that computes faster than this runs on the gateway's thread (see above). */
export const INLINE_MAX_MS = 0.2;
const INLINE_PROBES = 5;

function startThread(workerData: ThreadOptions, name: string): Worker {
  return startModuleThread(import.meta.url, 'onnx-thread', workerData, name);
}

export class OnnxEngine implements Engine {
  readonly name = 'onnx';

  createInstance(spec: ModelVersionSpec, index: number): EngineInstance {
    return new OnnxInstance(spec, index);
  }
}

interface Pending {
  resolve: (result: { outputs: ThreadTensor[]; computeMs: number }) => void;
  reject: (err: TensorgateError) => void;
}

class OnnxInstance implements EngineInstance {
  readonly label: string;
  private readonly file: string;
  private worker: Worker | undefined;
  /** The session on the gateway's thread, for passes of at most `inlineMaxElements` input elements. */
  private inline: Session | undefined;
  private inlineMaxElements = 0;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private closing = false;
  private readonly crashListeners: ((err: Error) => void)[] = [];

  constructor(
    private readonly spec: ModelVersionSpec,
    index: number,
  ) {
    const { config, version, dir } = spec;
    const v = config.versions[version];
    if (v?.format !== 'onnx') throw tgError('INVALID_CONFIG', `${config.name}@${version} is not an onnx model version`);
    this.file = join(dir, version, v.file);
    this.label = `${config.name}@${version}#${index} (onnxruntime)`;
  }

  async start(): Promise<LoadInfo> {
    const { config, version } = this.spec;
    const name = `${config.name}@${version}`;
    if (!existsSync(this.file)) throw tgError('LOAD_FAILED', `${name}: ${this.file} does not exist`);
    const loadStart = performance.now();
    const options: ThreadOptions = {
      file: this.file,
      threads: config.resources.threads,
      graphOptimization: config.optimization.onnx_graph,
    };
    const worker = startThread(options, this.label);
    let settle: (message: FromThread | Error) => void = () => {};
    const onMessage = (message: FromThread) => settle(message);
    const onError = (err: Error) => settle(err);
    const onExit = (code: number) => settle(new Error(`it exited (${code})`));
    worker.on('message', onMessage).on('error', onError).on('exit', onExit);
    const first = await new Promise<FromThread | Error>((resolve) => {
      settle = resolve;
    });
    worker.off('message', onMessage).off('error', onError).off('exit', onExit);
    if (first instanceof Error || first.kind !== 'ready') {
      await worker.terminate();
      const reason =
        first instanceof Error
          ? `the ONNX Runtime thread failed: ${first.message}`
          : `ONNX Runtime cannot load ${this.file}: ${first.kind === 'failed' ? first.message : first.kind}`;
      throw tgError('LOAD_FAILED', `${name}: ${reason}`, { model: config.name, version });
    }
    const ready = first;
    const problems = checkSignature(ready.inputs, ready.outputs, config.inputs, config.outputs);
    if (problems.length > 0) {
      await worker.terminate();
      throw tgError('LOAD_FAILED', `${name}: ${this.file} does not match config.json: ${problems.join('; ')}`, {
        model: config.name,
        version,
        problems,
      });
    }
    this.attach(worker);
    const loadMs = performance.now() - loadStart;
    const warmStart = performance.now();
    for (let i = 0; i < config.warmup_runs; i++) await this.run(warmupInputs(config.inputs));
    const warmupMs = performance.now() - warmStart;
    const inline = await this.chooseInline(options);
    return {
      device: 'cpu',
      loadMs,
      warmupMs,
      weightsBytes: statSync(this.file).size,
      runtime: ready.runtime,
      variants: [
        {
          precision: 'fp32',
          engine: 'onnx',
          method: `ONNX Runtime, graph optimization ${options.graphOptimization}${inline}`,
          state: 'ready',
        },
      ],
    };
  }

  /**
   * Times a full batch in the thread; when it is quick enough, opens the session on this thread.
   * Returns how the describe_model method line says it.
   */
  private async chooseInline(options: ThreadOptions): Promise<string> {
    const { config } = this.spec;
    const rows = config.batching?.max_batch_size ?? 1;
    const probe = () => warmupInputs(config.inputs, rows);
    const times: number[] = [];
    // A fresh probe each pass: the thread is handed its buffers.
    for (let i = 0; i < INLINE_PROBES; i++) times.push((await this.run(probe())).computeMs);
    const median = times.sort((a, b) => a - b)[INLINE_PROBES >> 1] as number;
    if (median >= INLINE_MAX_MS) return '';
    this.inline = await openSession(options);
    this.inlineMaxElements = elementsOf(probe());
    return `; passes of up to ${rows} rows run on the gateway's thread (${median.toFixed(3)} ms each), larger ones in the session's thread`;
  }

  async infer(request: EngineRequest): Promise<EngineResponse> {
    const fillStart = performance.now();
    const inline = this.inline !== undefined && elementsOf(request.inputs) <= this.inlineMaxElements;
    // The one copy for the thread: each input into a buffer of its own, which then moves there.
    // Inline, bytes already in memory are read where they are; runSession's typedView copies those
    // not aligned for their type (a binary OIP body places a tensor at any offset).
    const inputs = request.inputs.map(({ name, tensor }) => {
      let data = inline ? tensor.data : undefined;
      if (!data) {
        data = new Uint8Array(tensor.byteLength);
        if (tensor.data) data.set(tensor.data);
        else tensor.fill(data);
      }
      return { name, tensor: { dtype: tensor.dtype, shape: tensor.shape, data } };
    });
    const sendStart = performance.now();
    const { outputs, computeMs } = await (inline ? this.runInline(inputs) : this.run(inputs));
    return {
      outputs,
      timings: {
        fillMs: sendStart - fillStart,
        // Handing the buffers to the thread and back (and waiting for it to pick them up), or,
        // inline, wrapping them as ONNX Runtime tensors.
        transferMs: Math.max(0, performance.now() - sendStart - computeMs),
        computeMs,
      },
    };
  }

  onCrash(listener: (err: Error) => void): void {
    this.crashListeners.push(listener);
  }

  async close(): Promise<void> {
    this.closing = true;
    const inline = this.inline;
    this.inline = undefined;
    await inline?.release();
    const worker = this.worker;
    this.worker = undefined;
    if (!worker) return;
    const exited = new Promise((resolve) => worker.once('exit', resolve));
    worker.postMessage({ kind: 'close' } satisfies ToThread);
    // A thread stuck in a forward pass is not waited for beyond a moment.
    const timer = setTimeout(() => void worker.terminate(), 2000);
    await exited;
    clearTimeout(timer);
  }

  private attach(worker: Worker): void {
    this.worker = worker;
    worker.on('message', (message: FromThread) => {
      if (message.kind !== 'result' && message.kind !== 'error') return;
      const pending = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (message.kind === 'result') pending?.resolve(message);
      else
        pending?.reject(
          tgError('INFERENCE_FAILED', `${this.label}: ${message.message}`, { model: this.spec.config.name }),
        );
    });
    const died = (err: Error) => {
      if (this.closing || this.worker !== worker) return;
      this.worker = undefined;
      const crash = tgError('WORKER_CRASHED', `${this.label}: the ONNX Runtime thread ended: ${err.message}`);
      for (const pending of this.pending.values()) pending.reject(crash);
      this.pending.clear();
      for (const listener of this.crashListeners) listener(crash);
    };
    worker.on('error', died);
    worker.on('exit', (code) => died(new Error(`exit code ${code}`)));
  }

  private async runInline(inputs: NamedTensor[]): Promise<{ outputs: NamedTensor[]; computeMs: number }> {
    try {
      const { outputs, computeMs } = await runSession(this.inline as Session, toThread(inputs));
      return { outputs: this.spec.config.outputs.map((spec) => fromThread(outputs, spec)), computeMs };
    } catch (err) {
      throw tgError('INFERENCE_FAILED', `${this.label}: ${(err as Error).message}`, { model: this.spec.config.name });
    }
  }

  private run(inputs: NamedTensor[]): Promise<{ outputs: NamedTensor[]; computeMs: number }> {
    const worker = this.worker;
    if (!worker) return Promise.reject(tgError('MODEL_NOT_READY', `${this.label} is not loaded`));
    const id = this.nextId++;
    const message: ToThread = { kind: 'run', id, inputs: toThread(inputs) };
    const transfer = inputs
      .map(({ tensor }) => tensor.data.buffer as ArrayBuffer)
      .filter((buffer, i, all) => all.indexOf(buffer) === i);
    return new Promise((resolve, reject) => {
      this.pending.set(id, {
        resolve: ({ outputs, computeMs }) => {
          try {
            resolve({ outputs: this.spec.config.outputs.map((spec) => fromThread(outputs, spec)), computeMs });
          } catch (err) {
            reject(err);
          }
        },
        reject,
      });
      try {
        worker.postMessage(message, transfer);
      } catch (err) {
        // A buffer that cannot be handed over (already handed to the thread): this pass fails alone.
        this.pending.delete(id);
        reject(tgError('INFERENCE_FAILED', `${this.label}: ${(err as Error).message}`));
      }
    });
  }
}

function toThread(inputs: NamedTensor[]): ThreadTensor[] {
  return inputs.map(({ name, tensor }) => ({
    name,
    type: ORT_TYPES[tensor.dtype] as string,
    dims: tensor.shape,
    data: tensor.data,
  }));
}

function elementsOf(inputs: readonly { tensor: { shape: readonly number[] } }[]): number {
  return inputs.reduce((sum, { tensor }) => sum + tensor.shape.reduce((a, b) => a * b, 1), 0);
}

function fromThread(outputs: ThreadTensor[], spec: TensorSpec): NamedTensor {
  const out = outputs.find((o) => o.name === spec.name);
  if (!out) throw tgError('INFERENCE_FAILED', `the graph returned no output "${spec.name}"`);
  const elements = out.dims.reduce((a, b) => a * b, 1);
  if (out.type !== ORT_TYPES[spec.dtype] || out.data.byteLength !== elements * dtypeSize(spec.dtype))
    throw tgError('INFERENCE_FAILED', `output "${spec.name}" came back as ${out.type}, not ${spec.dtype}`);
  return { name: spec.name, tensor: { dtype: spec.dtype, shape: out.dims, data: out.data } };
}

/** Zeros of the declared shapes, `rows` for a dynamic first dimension and 1 for other dynamic ones. */
function warmupInputs(specs: TensorSpec[], rows = 1): NamedTensor[] {
  return specs.map((spec) => {
    const shape = spec.shape.map((d, i) => (d >= 0 ? d : i === 0 ? rows : 1));
    const bytes = shape.reduce((a, b) => a * b, 1) * dtypeSize(spec.dtype);
    return { name: spec.name, tensor: { dtype: spec.dtype, shape, data: new Uint8Array(bytes) } };
  });
}

/**
 * Every difference between the graph's inputs and outputs and the config's: a name missing on
 * either side, another element type, another rank, a fixed dimension that differs. A symbolic
 * dimension matches anything; the config's -1 matches only a symbolic one.
 */
function checkSignature(
  graphInputs: GraphValue[],
  graphOutputs: GraphValue[],
  inputs: TensorSpec[],
  outputs: TensorSpec[],
): string[] {
  const problems: string[] = [];
  for (const [kind, specs, graph] of [
    ['input', inputs, graphInputs],
    ['output', outputs, graphOutputs],
  ] as const) {
    const byName = new Map(graph.map((g) => [g.name, g]));
    for (const spec of specs) {
      const value = byName.get(spec.name);
      if (!value) {
        problems.push(`${kind} "${spec.name}" is not in the graph (it has ${[...byName.keys()].join(', ')})`);
        continue;
      }
      if (value.type === undefined || value.shape === undefined) {
        problems.push(`${kind} "${spec.name}" is not a tensor in the graph`);
        continue;
      }
      if (value.type !== ORT_TYPES[spec.dtype])
        problems.push(`${kind} "${spec.name}" is ${value.type} in the graph, ${spec.dtype} in the config`);
      if (value.shape.length !== spec.shape.length) {
        problems.push(
          `${kind} "${spec.name}" has rank ${value.shape.length} in the graph, ${spec.shape.length} in the config`,
        );
        continue;
      }
      value.shape.forEach((d, i) => {
        const want = spec.shape[i] as number;
        if (typeof d === 'number' && d >= 0 && d !== want)
          problems.push(`${kind} "${spec.name}" dimension ${i} is ${d} in the graph, ${want} in the config`);
      });
    }
    if (kind === 'input')
      for (const name of byName.keys())
        if (!specs.some((s) => s.name === name)) problems.push(`the graph's input "${name}" is not in the config`);
  }
  return problems;
}
