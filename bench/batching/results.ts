import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** The JSON bench/batching/run.ts writes to bench/results/ and bench/report.ts reads back. */

export type ModelKey = 'tabular' | 'image';

export interface BatchingSettings {
  max_batch_size: number;
  max_queue_delay_us: number;
  preferred_batch_sizes?: number[];
}

export interface VariantInfo {
  model: ModelKey;
  /** `off`, or `b<max>-d<delay µs>` for a batched copy. */
  id: string;
  /** The name it was registered under (a copy of the demo model with this `batching` section). */
  registered_as: string;
  batching: BatchingSettings | null;
}

export interface CellResult {
  model: ModelKey;
  variant: string;
  batching: BatchingSettings | null;
  concurrency: number;
  /** Calls that completed inside the measured windows, and how long those windows were in all. */
  requests: number;
  window_s: number;
  errors: Record<string, number>;
  throughput_rps: number;
  /** Client-side latency of each call (in-process `gateway.infer`), ms. */
  latency: Distribution;
  /** Per call, the server stages (ms): the batch's forward pass, the wait in the queue, the rest. */
  compute_ms: { p50: number; p99: number };
  queue_ms: { p50: number; p99: number };
  transfer_ms_p50: number;
  decode_ms_p50: number;
  encode_ms_p50: number;
  /** Forward passes by rows during the measured windows (difference of `poolStats().batches`). */
  batches: Record<string, number>;
  forward_passes: number;
  /** Rows per forward pass, mean over the measured forward passes. */
  mean_batch_rows: number;
  /** Share of the window the worker spent in forward passes (sum over passes of compute_ms). */
  forward_busy_pct: number;
  /** CPU used meanwhile, in % of one core: this Node process (gateway + clients) and its workers. */
  node_cpu_pct: number;
  workers_cpu_pct: number;
  /** Garbage collection in this process during the windows: share of the time, longest pause. */
  gc_pct: number;
  gc_max_ms: number;
  /** Mean share of the machine's CPUs used by other processes during the windows (%). */
  foreign_cpu_pct?: number;
  /** Batched cells: throughput / the unbatched throughput at the same concurrency, same run. */
  ratio_vs_off?: number;
  /** Batched cells: max_queue_delay + 2 x the p50 compute_ms of the batches, ms (issue 3). */
  p99_bound_ms?: number;
  /**
   * Batched cells: forward passes a call must wait for when every client has a call queued,
   * ceil(concurrency / max_batch_size); above 1 no scheduler can meet the bound (Little's law).
   */
  waves?: number;
}

export interface TargetResult {
  target: string;
  measured: number;
  detail: string;
  met: boolean;
}

export interface ModelSetup {
  name: string;
  version: string;
  input: { name: string; shape: number[]; dtype: 'float32'; form: 'array' | 'b64' | 'path'; bytes: number };
  threads: number;
  instances: number;
}

export interface BatchingResult {
  benchmark: 'batching';
  date: string;
  profiled: false;
  machine: MachineInfo;
  config: {
    transport: string;
    concurrency: number[];
    /** Measured seconds per cell (all rounds together), per model. */
    seconds: Record<ModelKey, number>;
    rounds: number;
    warmup_s: number;
    models: Record<ModelKey, ModelSetup>;
    variants: VariantInfo[];
    max_foreign_cpu: number;
    foreign_cpu_pct_at_start: number | null;
    wall_s: number;
  };
  cells: CellResult[];
  /** Per model, the batched variant with the highest throughput at the highest concurrency. */
  best: Partial<Record<ModelKey, string>>;
  targets: Record<string, TargetResult>;
}
