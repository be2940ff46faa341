import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { forkServerPids } from '../engines/torch/fork-server.js';
import type { TensorgateError } from '../errors.js';
import type { ModelSummaryInfo, StageTimings } from '../gateway.js';
import type { ModelPool } from '../scheduler/model-pool.js';
import { type CounterSeries, FastCounter, FastHistogram, type HistogramSeries } from './fast-metrics.js';
import type { GpuSample, GpuSnapshot } from './gpu.js';
import { processMemory } from './process-memory.js';
import { processUsage } from './process-usage.js';

/**
 * Prometheus metrics for `/metrics` (prom-client, on a registry of its own). Request counters and
 * durations carry Triton's names where the meaning is the same, so existing Triton dashboards and
 * alerts work; tensorgate's own histograms give every stage with buckets fine enough for
 * P50/P90/P99. A request only adds to numbers bound to its model version (fast-metrics.ts);
 * pool figures (queue depth, state, forward passes, worker memory and CPU) are read when scraped.
 */

export interface PoolView {
  listModels(): ModelSummaryInfo[];
  poolStats(name: string, version: string): ModelPool['stats'] | undefined;
  readonly registry: { readonly reachable: boolean };
}

const STAGES = ['decode', 'preprocess', 'queue', 'transfer', 'compute', 'postprocess', 'encode', 'total'] as const;
/** 25 µs to about 100 s, ~1.6x apart: enough resolution for percentiles at every scale served. */
const SECONDS_BUCKETS = Array.from({ length: 33 }, (_, i) => Number((25e-6 * 1.6 ** i).toPrecision(3)));
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const STATES = ['unloaded', 'loading', 'ready', 'failed', 'unloading'];

/** One model version's series, bound to its labels. */
interface Bound {
  success: CounterSeries;
  inferences: CounterSeries;
  requestUs: CounterSeries;
  queueUs: CounterSeries;
  inputUs: CounterSeries;
  inferUs: CounterSeries;
  outputUs: CounterSeries;
  decode: HistogramSeries;
  queue: HistogramSeries;
  transfer: HistogramSeries;
  compute: HistogramSeries;
  encode: HistogramSeries;
  total: HistogramSeries;
  batch: HistogramSeries;
  /** Bound on first use: only models with processing have these stages. */
  preprocess?: HistogramSeries;
  postprocess?: HistogramSeries;
  stage: (name: (typeof STAGES)[number]) => HistogramSeries;
}

export class PrometheusMetrics {
  readonly registry = new Registry();
  private readonly success: FastCounter;
  private readonly failure: Counter<'model' | 'version' | 'reason'>;
  private readonly inferences: FastCounter;
  private readonly durationUs: Record<'request' | 'queue' | 'input' | 'infer' | 'output', FastCounter>;
  private readonly stages: FastHistogram;
  private readonly batchRows: FastHistogram;
  private readonly errors: Counter<'code'>;
  private readonly dataPlaneBodies: Counter<'staging'>;
  private readonly bound = new Map<string, Bound>();
  /** Off: requests update nothing (bench/metrics-overhead measures the difference). */
  enabled = true;
  /** Forward passes seen per pool at the last scrape, to turn pool totals into a counter. */
  private readonly passesSeen = new Map<string, number>();

  constructor(private readonly pools: PoolView) {
    const registers = [this.registry];
    const modelLabels = ['model', 'version'] as const;
    const registry = this.registry;
    this.success = new FastCounter('nv_inference_request_success', 'Successful inference requests', registry);
    this.failure = new Counter({
      name: 'nv_inference_request_failure',
      help: 'Failed inference requests, by tensorgate error code',
      labelNames: [...modelLabels, 'reason'],
      registers,
    });
    this.inferences = new FastCounter(
      'nv_inference_count',
      'Inferences performed (rows: a batch of N counts N)',
      registry,
    );
    const duration = (name: string, help: string) =>
      new FastCounter(name, `${help}, cumulative microseconds`, registry);
    this.durationUs = {
      request: duration('nv_inference_request_duration_us', 'Request time end to end'),
      queue: duration('nv_inference_queue_duration_us', 'Time requests waited in the queue'),
      input: duration(
        'nv_inference_compute_input_duration_us',
        'Time moving inputs to the model (decode, shared memory, IPC)',
      ),
      infer: duration('nv_inference_compute_infer_duration_us', 'Forward pass time'),
      output: duration('nv_inference_compute_output_duration_us', 'Time getting outputs back and encoding them'),
    };
    this.stages = new FastHistogram(
      'tensorgate_request_stage_seconds',
      'Time of each stage of each request: decode, preprocess, queue, transfer, compute, postprocess, encode, total',
      SECONDS_BUCKETS,
      registry,
    );
    this.batchRows = new FastHistogram(
      'tensorgate_batch_size',
      'Rows in the forward pass that served each request (more than its own when batched)',
      BATCH_BUCKETS,
      registry,
    );
    this.errors = new Counter({
      name: 'tensorgate_errors_total',
      help: 'Failed requests by error code, whatever the model (unknown models included)',
      labelNames: ['code'],
      registers,
    });
    this.dataPlaneBodies = new Counter({
      name: 'tensorgate_oip_data_plane_bodies_total',
      help: 'Infer bodies with binary tensor data read by the OIP data port: staged by its thread for the worker, or unstaged (no room in the staging file: through the main thread)',
      labelNames: ['staging'],
      registers,
    });
    this.registerPoolMetrics(registers);
    // The gateway process's own: CPU, memory, open files, event-loop lag, heap and garbage
    // collection time by kind, under the names every Node dashboard knows (process_*, nodejs_*).
    // The event-loop lag is sampled every 100 ms, not prom-client's default 10: its timer woke an
    // idle gateway 100 times a second (2.6% of a core on the 2-core VM, for a stdio server that
    // mostly waits), and a scrape every few seconds still gets tens of samples.
    collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 100 });
  }

  /** A binary infer body the OIP data port read: staged by its thread, or not for want of room. */
  recordDataPlaneBody(staged: boolean): void {
    this.dataPlaneBodies.inc({ staging: staged ? 'staged' : 'unstaged' });
  }

  recordSuccess(
    model: string,
    version: string,
    variant: string,
    t: StageTimings,
    rows: number,
    batchSize: number,
  ): void {
    if (!this.enabled) return;
    const c = this.children(model, version, variant);
    c.success.value++;
    c.inferences.value += rows;
    c.requestUs.value += t.total_ms * 1000;
    c.queueUs.value += t.queue_ms * 1000;
    c.inputUs.value += (t.decode_ms + t.transfer_ms / 2) * 1000;
    c.inferUs.value += t.compute_ms * 1000;
    c.outputUs.value += (t.transfer_ms / 2 + t.encode_ms) * 1000;
    const stages = this.stages;
    stages.observe(c.decode, t.decode_ms / 1000);
    stages.observe(c.queue, t.queue_ms / 1000);
    stages.observe(c.transfer, t.transfer_ms / 1000);
    stages.observe(c.compute, t.compute_ms / 1000);
    stages.observe(c.encode, t.encode_ms / 1000);
    stages.observe(c.total, t.total_ms / 1000);
    if (t.preprocess_ms !== undefined) {
      c.preprocess ??= c.stage('preprocess');
      stages.observe(c.preprocess, t.preprocess_ms / 1000);
    }
    if (t.postprocess_ms !== undefined) {
      c.postprocess ??= c.stage('postprocess');
      stages.observe(c.postprocess, t.postprocess_ms / 1000);
    }
    this.batchRows.observe(c.batch, batchSize);
  }

  /**
   * The label-bound series of one variant of a model version, made once. Triton's counters are per
   * version (variants of one version share them); the histograms are per variant, so each one's
   * P50/P90/P99 can be read apart (an int8 next to its fp32, onnx next to torch).
   */
  private children(model: string, version: string, variant: string): Bound {
    const key = `${model}\0${version}\0${variant}`;
    let c = this.bound.get(key);
    if (!c) {
      const labels = { model, version };
      const stage = (name: (typeof STAGES)[number]) => this.stages.bind({ model, version, variant, stage: name });
      c = {
        success: this.success.bind(labels),
        inferences: this.inferences.bind(labels),
        requestUs: this.durationUs.request.bind(labels),
        queueUs: this.durationUs.queue.bind(labels),
        inputUs: this.durationUs.input.bind(labels),
        inferUs: this.durationUs.infer.bind(labels),
        outputUs: this.durationUs.output.bind(labels),
        decode: stage('decode'),
        queue: stage('queue'),
        transfer: stage('transfer'),
        compute: stage('compute'),
        encode: stage('encode'),
        total: stage('total'),
        batch: this.batchRows.bind({ model, version, variant }),
        stage,
      };
      this.bound.set(key, c);
    }
    return c;
  }

  /** A failed request: by code, and against the model version when it is known (Gateway.recordFailure). */
  recordFailure(model: string | undefined, version: string | undefined, error: TensorgateError): void {
    this.errors.inc({ code: error.code });
    if (model !== undefined && version !== undefined) this.failure.inc({ model, version, reason: error.code });
  }

  /**
   * GPU utilisation and memory, per GPU and per worker process: registered only once a GPU has
   * been seen, so a machine without one exposes no GPU series at all.
   */
  registerGpuMetrics(gpu: { readonly snapshot: GpuSnapshot | undefined }): void {
    const registers = [this.registry];
    const perGpu = (name: string, help: string, value: (g: GpuSample) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['gpu', 'name'],
        registers,
        collect() {
          this.reset();
          for (const g of gpu.snapshot?.gpus ?? []) this.set({ gpu: String(g.index), name: g.name }, value(g));
        },
      });
    perGpu(
      'tensorgate_gpu_utilization_ratio',
      'GPU busy fraction over the last sample period (nvidia-smi)',
      (g) => g.utilization,
    );
    perGpu('tensorgate_gpu_memory_used_bytes', 'GPU memory in use', (g) => g.memory_used_bytes);
    perGpu('tensorgate_gpu_memory_total_bytes', 'GPU memory in all', (g) => g.memory_total_bytes);
    const pools = this.pools;
    new Gauge({
      name: 'tensorgate_worker_gpu_memory_bytes',
      help: 'GPU memory each worker process holds',
      labelNames: ['model', 'version', 'pid'],
      registers,
      collect() {
        this.reset();
        const byPid = gpu.snapshot?.processMemoryBytes;
        if (!byPid) return;
        for (const m of pools.listModels())
          for (const v of m.versions)
            for (const pid of pools.poolStats(m.name, v.version)?.pids ?? []) {
              const bytes = byPid.get(pid);
              if (bytes !== undefined) this.set({ model: m.name, version: v.version, pid: String(pid) }, bytes);
            }
      },
    });
  }

  /** The exposition text, and its content type. */
  async render(): Promise<{ text: string; contentType: string }> {
    return { text: await this.registry.metrics(), contentType: this.registry.contentType };
  }

  private registerPoolMetrics(registers: Registry[]): void {
    const pools = this.pools;
    const each = (fn: (model: string, version: string, state: string, stats?: ModelPool['stats']) => void) => {
      for (const m of pools.listModels())
        for (const v of m.versions) fn(m.name, v.version, v.state, pools.poolStats(m.name, v.version));
    };
    const passesSeen = this.passesSeen;
    new Counter({
      name: 'nv_inference_exec_count',
      help: 'Forward passes (batches) executed',
      labelNames: ['model', 'version'],
      registers,
      collect() {
        each((model, version, _state, stats) => {
          const total = Object.values(stats?.batches ?? {}).reduce((a, b) => a + b, 0);
          const key = `${model}\0${version}`;
          const seen = passesSeen.get(key) ?? 0;
          // A pool unloaded and loaded again starts from 0: count its passes from there.
          this.inc({ model, version }, total >= seen ? total - seen : total);
          passesSeen.set(key, total);
        });
      },
    });
    new Gauge({
      name: 'tensorgate_queue_depth',
      help: 'Requests waiting for an instance',
      labelNames: ['model', 'version'],
      registers,
      collect() {
        this.reset();
        each((model, version, _state, stats) => this.set({ model, version }, stats?.queued ?? 0));
      },
    });
    new Gauge({
      name: 'tensorgate_model_state',
      help: 'Model version state: 1 for the state it is in',
      labelNames: ['model', 'version', 'state'],
      registers,
      collect() {
        this.reset();
        each((model, version, state) => {
          for (const s of STATES) this.set({ model, version, state: s }, s === state ? 1 : 0);
        });
      },
    });
    const workerPids = () => {
      const out: { model: string; version: string; pid: number }[] = [];
      each((model, version, _state, stats) => {
        for (const pid of stats?.pids ?? []) out.push({ model, version, pid });
      });
      return out;
    };
    const workers = () =>
      workerPids().flatMap((w) => {
        const usage = processUsage(w.pid);
        return usage ? [{ ...w, ...usage }] : [];
      });
    new Gauge({
      name: 'tensorgate_model_loaded_bytes',
      help: 'Parameters and buffers a loaded model version holds, all its instances together',
      labelNames: ['model', 'version'],
      registers,
      collect() {
        this.reset();
        for (const m of pools.listModels())
          for (const v of m.versions)
            if (v.loaded_bytes !== undefined) this.set({ model: m.name, version: v.version }, v.loaded_bytes);
      },
    });
    new Gauge({
      name: 'tensorgate_worker_resident_memory_bytes',
      help: 'Resident memory of each worker process (the model loaded in it included)',
      labelNames: ['model', 'version', 'pid'],
      registers,
      collect() {
        this.reset();
        for (const w of workers()) this.set({ model: w.model, version: w.version, pid: String(w.pid) }, w.rssBytes);
      },
    });
    new Gauge({
      name: 'tensorgate_worker_proportional_memory_bytes',
      help: 'Proportional set size of each worker process: its own pages and its share of those it shares with its fork server and siblings (their sum is what the workers hold)',
      labelNames: ['model', 'version', 'pid'],
      registers,
      // Read off the main thread (process-memory.ts), then set at once: a scrape that comes
      // meanwhile does not interleave its reset with these values.
      async collect() {
        const pids = workerPids();
        const rollups = await processMemory.rollups(pids.map((w) => w.pid));
        this.reset();
        for (const w of pids) {
          const memory = rollups.get(w.pid);
          if (memory) this.set({ model: w.model, version: w.version, pid: String(w.pid) }, memory.pssBytes);
        }
      },
    });
    new Gauge({
      name: 'tensorgate_fork_server_proportional_memory_bytes',
      help: 'Proportional set size of each fork server the workers are forked from (torch, imported once)',
      labelNames: ['pid'],
      registers,
      async collect() {
        const rollups = await processMemory.rollups(forkServerPids());
        this.reset();
        for (const [pid, memory] of rollups) this.set({ pid: String(pid) }, memory.pssBytes);
      },
    });
    new Gauge({
      name: 'tensorgate_registry_up',
      help: 'Whether the registry is reachable (0 while a shared PostgreSQL registry is down; loaded models keep serving)',
      registers,
      collect() {
        this.set(pools.registry.reachable ? 1 : 0);
      },
    });
    new Gauge({
      name: 'tensorgate_worker_cpu_seconds',
      help: 'CPU time (user + system) each worker process has used',
      labelNames: ['model', 'version', 'pid'],
      registers,
      collect() {
        this.reset();
        for (const w of workers()) this.set({ model: w.model, version: w.version, pid: String(w.pid) }, w.cpuSeconds);
      },
    });
  }
}
