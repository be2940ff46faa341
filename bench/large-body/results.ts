import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/large-body/run.ts writes to bench/results/large-body-<time>.json. */

export interface LargeBodyScenario {
  /** `<model>/c<concurrency>`, e.g. `channel-mean/c8`. */
  name: string;
  /** Which gateway served it: `shipped`, or `v8-default` (TENSORGATE_V8_HEAP=default). */
  gateway: string;
  model: string;
  concurrency: number;
  latency: Distribution;
  calls_per_s: number;
  /** CPU time per call from /proc: the serving gateway, and the worker it started. */
  cpu_ms_per_call: { gateway: number; worker: number };
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
    input_bytes: number;
    seconds: number;
    /** What was measured, when not this checkout as it is (e.g. an earlier commit's server). */
    label?: string;
  };
  /** The raw forward per model, in one Python process, on the same input. */
  raw: Record<string, Distribution>;
  scenarios: LargeBodyScenario[];
}
