import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/peers/run.ts writes to bench/results/peers-<time>.json. */

export type SystemId = 'raw' | 'tensorgate-mcp' | 'tensorgate-oip' | 'kserve' | 'mcp-list' | 'litserve';

export interface PeerBlock {
  system: SystemId;
  model: string;
  concurrency: number;
  latency: Distribution;
  /** Requests per second over the measured time. */
  throughput: number;
  /** The load generator's own CPU (this process), to show it is not the bottleneck. */
  client_cpu_percent: number;
}

export interface PeersResult {
  benchmark: 'peers';
  date: string;
  machine: MachineInfo;
  config: {
    models: string[];
    concurrency: number[];
    seconds: number;
    warmup_ms: number;
    batching: { max_batch_size: number; max_queue_delay_us: number };
  };
  blocks: PeerBlock[];
}
