import type { MachineInfo } from '../mcp-overhead/machine.js';

/** The JSON bench/worker-start/run.ts writes to bench/results/ and bench/report.ts reads back. */

export type WorkerStartMode = 'spawn' | 'fork';

export interface WorkerStartRow {
  mode: WorkerStartMode;
  /** `register` of the model with all its instances, to every instance ready (a fresh gateway). */
  ready_ms: number;
  /** From a worker's SIGKILL to the model answering again, each instance once: their median. */
  restart_p50_ms: number;
  restart_max_ms: number;
  /** CPU time of the workers (and the fork server) when all are ready, all together. */
  cpu_s: number;
  /** Proportional set size of the workers (and the fork server) when all are ready, summed. */
  pss_mb: number;
  /** Memory private to one process (clean and dirty), summed over the same processes. */
  private_mb: number;
  /** The fork server's own share of the figures above (fork rows only). */
  fork_server?: { cpu_s: number; pss_mb: number; private_mb: number };
}

export interface WorkerStartResult {
  benchmark: 'worker-start';
  date: string;
  profiled: false;
  machine: MachineInfo;
  config: { model: string; instances: number; wall_s: number };
  /** spawn first: the baseline the ratios divide by. */
  rows: WorkerStartRow[];
}
