import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** The JSON bench/oip/run.ts writes to bench/results/oip-<time>.json. */

export type Form = 'json' | 'binary' | 'shm';
export type ModelKey = 'tabular' | 'tabular_batched' | 'image';

export interface BlockResult {
  /** Absent in the first results file, which measured tensorgate only. */
  server?: 'tensorgate' | 'kserve';
  model: ModelKey;
  concurrency: number;
  form: Form;
  /** Milliseconds per call, measured by the client. */
  latency: Distribution;
  /** Calls answered per second. */
  throughput: number;
  errors: number;
  /** This client's CPU over the block, in % of one core. */
  client_cpu_percent: number;
  p50_overhead_ms: number;
  rounds_p50: number[];
}

export interface OipResult {
  benchmark: 'oip';
  date: string;
  profiled: false;
  machine: MachineInfo;
  config: { seconds: number; rounds: number; warmup_s: number; concurrency: number[] };
  raw_forward: Partial<Record<ModelKey, Distribution>>;
  blocks: BlockResult[];
}
