import type { MachineInfo } from '../mcp-overhead/machine.js';

/** The JSON bench/training/run.ts writes to bench/results/training-<time>.json. */

export interface LoopResult {
  round: number;
  median_us: number;
  mean_us: number;
  p90_us: number;
  p99_us: number;
  /** Time in the mode's own per-step code (for sdk: log + apply, timed in place). */
  hook_median_us: number;
  hook_mean_us: number;
  /** Distinct lr values the optimizer held during the run: >1 shows the changes arrived. */
  distinct_lrs: number;
  /** Steps at which the optimizer's lr differed from the step before: changes that landed. */
  lr_changes: number;
  /** CPU the server used during the run, in % of one core. */
  server_cpu_percent: number;
  changes_sent?: number;
  get_run_calls?: number;
  http_requests?: number;
}

export interface ModeResult {
  median_us: number;
  vs_none: number;
  overhead_us: number;
  runs: LoopResult[];
}

export interface MicroForm {
  sdk_ns: number;
  loop_ns: number;
  cost_us: number;
}

export interface MicroResult {
  iterations: number;
  float: MicroForm;
  cpu_tensor: MicroForm;
}

export interface TrainingResult {
  benchmark: 'training';
  date: string;
  profiled: false;
  machine: MachineInfo;
  config: { rounds: number; warmup: number; model: string; pinned: boolean };
  sizes: {
    name: string;
    hidden: number;
    batch: number;
    steps: number;
    modes: Record<'none' | 'sdk_idle' | 'sdk' | 'naive', ModeResult>;
  }[];
  micro: MicroResult;
}
