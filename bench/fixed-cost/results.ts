import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/fixed-cost/run.ts writes to bench/results/fixed-cost-<time>.json. */

export interface ScenarioResult {
  name: string;
  what: string;
  latency: Distribution;
  /** p50 - the raw forward's p50. */
  over_raw_ms?: number;
  /** Medians of the stage timings the server reported (tensorgate's scenarios). */
  server_ms?: Record<string, number>;
  /** CPU time per call from /proc: the serving gateway, and the workers it started. */
  cpu_ms_per_call?: { gateway: number; worker: number };
}

export interface TargetResult {
  target: string;
  goal: string;
  measured_over_raw_ms: number;
  allowed_ms: number;
  met: boolean;
}

export interface FixedCostResult {
  benchmark: 'fixed-cost';
  date: string;
  profiled: false;
  machine: MachineInfo;
  config: {
    model: string;
    format: string;
    calls: number;
    rounds: number;
    warmup: number;
    spin_us: number;
    seconds: number;
    /** What was measured, when not this checkout as it is (e.g. an earlier commit, for comparison). */
    label?: string;
    /** The CPUs of the `@placed` scenarios, or why there are none (older runs: absent). */
    placement?: { gateway: number; worker: number } | { none: string };
  };
  scenarios: ScenarioResult[];
  targets: TargetResult[];
  median_raw_ms: number;
}

/** What bench/fixed-cost/ab.ts writes to bench/results/fixed-cost-ab-<time>.json. */
export interface FixedCostAbResult {
  benchmark: 'fixed-cost-ab';
  date: string;
  profiled: false;
  machine: MachineInfo;
  /** Each build: its checkout and commit, and what it is. */
  a: { root: string; commit: string; label?: string };
  b: { root: string; commit: string; label?: string };
  config: { calls: number; rounds: number; warmup: number; spin_us: number; seconds: number };
  results: {
    scenario: string;
    p50_a_ms: number;
    p50_b_ms: number;
    /** Median over rounds of (B's block median - A's), µs. */
    diff_us: number;
    /** Rounds whose B block median was below A's. */
    b_faster_rounds: number;
  }[];
}
