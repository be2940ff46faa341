import { closeSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { type TensorgateError, tgError } from '../../errors.js';
import type { Logger } from '../../observability/logger.js';
import { instanceCpus } from '../../registry/model-config.js';
import { allRowsWritten, type SinkRows, type TensorSource } from '../../tensor/source.js';
import { byteLength } from '../../tensor/tensor.js';
import type {
  EngineInstance,
  EngineRequest,
  EngineResponse,
  LoadInfo,
  ModelVersionSpec,
  NamedTensor,
} from '../engine.js';
import { arenaPath, InputArena, OutputArenaReader } from './arena.js';
import { AnswerSpin } from './loop-spin.js';
import {
  type FileRead,
  type FileWrite,
  InferResultSchema,
  LoadResultSchema,
  loadRequestModel,
  type TensorHeader,
} from './protocol.js';
import { WorkerProcess } from './worker-process.js';

/**
 * One model version loaded in one Python worker. Inputs are copied once into the input arena, the
 * worker views them in place, and outputs are copied once out of the output arena and released.
 * Inputs that lie in a file (a shared-memory region, a `.npy` file) are read into the arena by the
 * worker itself, through a descriptor the gateway holds for the request, when the worker can open
 * the gateway's descriptors: their bytes then never pass through the gateway's thread, which
 * serves every request of the process. Outputs a request wants in a file (EngineRequest.sinks) the
 * same worker copies there itself; an output whose every row went to files is not read back.
 */

let instanceCounter = 0;

export interface TorchInstanceOptions {
  onLog?: Logger;
  /** Where the worker keeps compiled variants between loads; unset: compiled at every load. */
  cacheDir?: string;
}

export class TorchInstance implements EngineInstance {
  readonly label: string;
  /**
   * The worker reads its next request while it answers the last one: the next is sent before that
   * answer comes (see EngineInstance.pipelineDepth), so the worker never sleeps waiting for it.
   */
  readonly pipelineDepth = 2;
  private worker: WorkerProcess | undefined;
  private arenaIn: InputArena | undefined;
  private arenaOut: OutputArenaReader | undefined;
  private closing = false;
  /** Output slots already copied out, to be freed by the worker with the next request. */
  private readonly readOutputs: number[] = [];
  private readonly crashListeners: ((err: Error) => void)[] = [];
  /** Whether the gateway waits for this worker's answers awake: set by the spin the load reports. */
  private answerSpin: AnswerSpin | undefined;
  /** Whether the worker reads TensorSource.file spans itself (its hello says it can). */
  private workerReadsFiles = false;

  constructor(
    private readonly spec: ModelVersionSpec,
    private readonly index: number,
    private readonly options: TorchInstanceOptions = {},
  ) {
    this.label = `${spec.config.name}@${spec.version}#${index}`;
  }

  async start(): Promise<LoadInfo> {
    const { config, version, dir } = this.spec;
    const tag = `${++instanceCounter}`;
    const inputBytes = config.inputs.reduce((sum, s) => sum + specBytes(s.dtype, s.shape), 0);
    const outputBytes = config.outputs.reduce((sum, s) => sum + specBytes(s.dtype, s.shape), 0);
    this.arenaIn = new InputArena(arenaPath(`${tag}-in`), Math.max(inputBytes * 4, 1 << 20));
    this.arenaOut = new OutputArenaReader(arenaPath(`${tag}-out`));
    const worker = new WorkerProcess({
      arenaIn: this.arenaIn.path,
      arenaOut: this.arenaOut.path,
      outBytes: Math.max(outputBytes * 4, 1 << 20),
      label: this.label,
      onLog: this.options.onLog,
      logFields: { model: config.name, version },
    });
    this.worker = worker;
    worker.onExitOnce((err) => this.onWorkerExit(err));
    const hello = await worker.hello;
    this.workerReadsFiles = hello.reads_files;
    const model = loadRequestModel(config, version, dir);
    const variants = {
      precisions: config.parameters.precision,
      torch_optimization: config.optimization.torch,
      compile_mode: config.optimization.compile_mode,
      // Only what the config sets: the worker's defaults depend on the device (CUDA's fp32 is TF32).
      tolerance: config.validation.tolerance,
      ...(this.options.cacheDir ? { cache_dir: this.options.cacheDir } : {}),
    };
    // Unset: the worker picks by the device it loaded on (CUDA spins, the CPU does not).
    const spinUs = config.resources.spin_us;
    const { cpus, pipeline } = config.resources;
    const loaded = LoadResultSchema.parse(
      await this.loadWithin(worker, {
        model,
        variants,
        ...(spinUs !== undefined ? { spin_us: spinUs } : {}),
        ...(pipeline !== undefined ? { pipeline } : {}),
        ...(cpus ? { cpus: instanceCpus(cpus, config.resources.instances, this.index) } : {}),
      }),
    );
    // A worker that spins answers at once; the gateway keeps its loop turning for that answer.
    this.answerSpin = new AnswerSpin((loaded.spin_us ?? 0) / 1000, { wakeEarly: loaded.device.startsWith('cuda') });
    return {
      device: loaded.device,
      loadMs: loaded.load_ms,
      warmupMs: loaded.warmup_ms,
      weightsBytes: loaded.weights_bytes,
      runtime: `torch ${hello.torch} (python ${hello.python})`,
      variants: loaded.variants.map((v) => ({ ...v, engine: 'torch' })),
    };
  }

  async infer(request: EngineRequest): Promise<EngineResponse> {
    const worker = this.worker;
    const arenaIn = this.arenaIn;
    const arenaOut = this.arenaOut;
    if (!worker || !arenaIn || !arenaOut) throw new Error(`${this.label} used before start()`);

    const t0 = performance.now();
    const headers: TensorHeader[] = [];
    const spans: Spans = { reads: [], opened: [], held: [] };
    let fillMs = 0;
    try {
      for (const { name, tensor } of request.inputs) {
        const header = (offset: number): TensorHeader => ({
          name,
          dtype: tensor.dtype,
          shape: tensor.shape,
          offset,
          nbytes: tensor.byteLength,
          ...(tensor.bytes ? { bytes: true as const } : {}),
        });
        if (tensor.data) {
          headers.push(header(arenaIn.write(tensor.data)));
          continue;
        }
        // Decode or read straight into the slot the worker will view: no intermediate buffer.
        const slot = arenaIn.reserve(tensor.byteLength);
        headers.push(header(slot.offset)); // before the fill, so that a failed fill is released too
        const fillStart = performance.now();
        this.place(tensor, slot.view, slot.offset, spans);
        slot.commit();
        fillMs += performance.now() - fillStart;
      }
      const t1 = performance.now();
      // Output slots read by the previous request are freed by this one's header: no extra message.
      const release = this.readOutputs.splice(0);
      const writes = this.workerReadsFiles && request.sinks?.length ? request.sinks : undefined;
      for (const { sink } of writes ?? []) if (sink.hold) spans.held.push(sink.hold());
      const answered = this.answerSpin?.begin();
      let raw: Record<string, unknown>;
      try {
        raw = await worker.request('infer', {
          inputs: headers,
          parameters: { precision: request.precision },
          ...(spans.reads.length > 0 ? { reads: spans.reads } : {}),
          ...(writes ? { writes: writes.map(fileWrite) } : {}),
          ...(release.length > 0 ? { release } : {}),
        });
      } finally {
        answered?.();
      }
      const t2 = performance.now();
      const result = InferResultSchema.parse(raw);
      const written = writes ? sinksWritten(writes, result.written ?? []) : undefined;
      const outputs: NamedTensor[] = result.outputs.map((h) =>
        written && allRowsWritten(written.get(h.name) ?? [], h.shape[0] ?? 0)
          ? { name: h.name, written: true, tensor: { dtype: h.dtype, shape: h.shape, data: NOTHING } }
          : { name: h.name, tensor: { dtype: h.dtype, shape: h.shape, data: arenaOut.read(h.offset, h.nbytes) } },
      );
      for (const h of result.outputs) this.readOutputs.push(h.offset);
      const t3 = performance.now();
      const computeMs = result.timings.compute_ms;
      const preprocessMs = result.timings.preprocess_ms;
      const postprocessMs = result.timings.postprocess_ms;
      // The worker's reads stand for the gateway's fill: the same stage, done elsewhere.
      const readMs = result.timings.read_ms ?? 0;
      // Everything that is not the forward pass (or processing) is the cost of moving data and
      // headers across.
      const inWorker = computeMs + readMs + (preprocessMs ?? 0) + (postprocessMs ?? 0);
      return {
        outputs,
        ...(result.answers ? { answers: result.answers } : {}),
        ...(result.geometry ? { geometry: result.geometry } : {}),
        timings: {
          fillMs: fillMs + readMs,
          computeMs,
          transferMs: t1 - t0 - fillMs + (t2 - t1 - inWorker) + (t3 - t2),
          ...(preprocessMs !== undefined ? { preprocessMs } : {}),
          ...(postprocessMs !== undefined ? { postprocessMs } : {}),
        },
      };
    } finally {
      for (const h of headers) arenaIn.release(h.offset);
      for (const fd of spans.opened) closeSync(fd);
      for (const release of spans.held) release();
    }
  }

  /**
   * Writes `source` into `view`, the arena slot at `offset`, except the spans the worker can read
   * itself (a file, or the file parts of a batch), which are added to `spans.reads` instead.
   */
  private place(source: TensorSource, view: Buffer, offset: number, spans: Spans): void {
    const file = source.file;
    if (this.workerReadsFiles && file) {
      const { position, what, truncated } = file;
      const path = file.open ? openForRequest(file.open, spans.opened) : file.path;
      if (file.hold) spans.held.push(file.hold());
      spans.reads.push({
        offset,
        nbytes: source.byteLength,
        path,
        position,
        what,
        ...(truncated ? { code: truncated } : {}),
      });
      return;
    }
    if (this.workerReadsFiles && source.parts) {
      let at = 0;
      for (const part of source.parts) {
        this.place(part, view.subarray(at, at + part.byteLength), offset + at, spans);
        at += part.byteLength;
      }
      return;
    }
    source.fill(view);
  }

  get pid(): number | undefined {
    return this.worker?.pid;
  }

  onCrash(listener: (err: Error) => void): void {
    this.crashListeners.push(listener);
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.worker?.shutdown();
    this.arenaIn?.close();
    this.arenaOut?.close();
  }

  /**
   * The load request, bounded by `resources.load_timeout_s`: a worker stuck in a model's load
   * code is stopped, so that a restart that hangs is given up like one that fails.
   */
  private loadWithin(worker: WorkerProcess, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const seconds = this.spec.config.resources.load_timeout_s;
    const loading = worker.request('load', body);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        loading.catch(() => {}); // Rejected by the kill below; this error is the one reported.
        reject(
          tgError('LOAD_FAILED', `${this.label} did not load within ${seconds} s (resources.load_timeout_s); stopped`, {
            worker: this.label,
          }),
        );
        worker.kill();
      }, seconds * 1000);
    });
    return Promise.race([loading, timedOut]).finally(() => clearTimeout(timer));
  }

  private onWorkerExit(err: TensorgateError): void {
    this.arenaIn?.close();
    this.arenaOut?.close();
    if (!this.closing) for (const listener of this.crashListeners) listener(err);
  }
}

/**
 * What the worker reads itself, the descriptors opened for it, and the holds on descriptors it
 * may open (FileSpan.hold): all kept until the worker has answered.
 */
interface Spans {
  reads: FileRead[];
  opened: number[];
  held: (() => void)[];
}

const NOTHING = new Uint8Array(0);

function fileWrite({ sink, row, rows }: SinkRows): FileWrite {
  const { output, path, position, capacity } = sink;
  return { output, row, ...(rows !== undefined ? { rows } : {}), path, position, capacity };
}

/** Marks the sinks the worker wrote; returns them by output. */
function sinksWritten(writes: readonly SinkRows[], done: number[]): Map<string, SinkRows[]> {
  const byOutput = new Map<string, SinkRows[]>();
  for (const index of done) {
    const entry = writes[index];
    if (!entry) continue;
    entry.sink.written = true;
    const list = byOutput.get(entry.sink.output);
    if (list) list.push(entry);
    else byOutput.set(entry.sink.output, [entry]);
  }
  return byOutput;
}

/** Opens a span's file for this request: the worker reads it through the descriptor. */
function openForRequest(open: () => number, opened: number[]): string {
  const fd = open();
  opened.push(fd);
  return `/proc/${process.pid}/fd/${fd}`;
}

function specBytes(dtype: Parameters<typeof byteLength>[0], shape: number[]): number {
  return byteLength(
    dtype,
    shape.map((d) => (d < 0 ? 1 : d)),
  );
}
