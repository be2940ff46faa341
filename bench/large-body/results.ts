import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/large-body/run.ts writes to bench/results/large-body-<time>.json. */

export interface LargeBodyScenario {
  /** `<model>/c<concurrency>`, e.g. `channel-mean/c8`; `batched-binary/c32`, `batched-shm/c32`. */
  name: string;
  /** Which gateway served it: `shipped`, or `v8-default` (TENSORGATE_V8_HEAP=default). */
  gateway: string;
  model: string;
  concurrency: number;
  latency: Distribution;
  calls_per_s: number;
  /**
   * CPU time per call from /proc: the serving gateway (all its threads), its main thread alone
   * (JavaScript: 1000 / gateway_main bounds one gateway's calls per second), and its worker.
   * Runs before gateway_main was measured lack it.
   */
  cpu_ms_per_call: { gateway: number; gateway_main?: number; worker: number };
  /** The gateway's garbage collection (its /metrics): time per call, full collections per 1000 calls. */
  gc?: { ms_per_call: number; major_per_1000_calls: number };
}

export interface LargeBodyResult {
  benchmark: 'large-body';
  date: string;
  profiled: false;
  machine: MachineInfo;
  config: {
    calls: number;
    rounds: number;
    warmup: number;
    /** Clients of the batched scenarios (absent before they were measured). */
    wide?: number;
    /** Threads of the shipped gateway's OIP data plane; 0 or absent: none was measured. */
    data_threads?: number;
    input_bytes: number;
    seconds: number;
    /** What was measured, when not this checkout as it is (e.g. an earlier commit's server). */
    label?: string;
  };
  /** The raw forward per model, in one Python process, on the same input. */
  raw: Record<string, Distribution>;
  scenarios: LargeBodyScenario[];
}
