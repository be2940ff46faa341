import type { ProfileSummary } from './cpu-profile.js';
import type { MachineInfo } from './machine.js';
import type { Distribution } from './stats.js';

/** The JSON a run writes to bench/results/ and bench/report.ts reads back. */

export type Transport = 'python' | 'stdio' | 'http' | 'echo' | 'sdk-echo';

export type Form =
  | 'forward'
  | 'forward, gaps'
  | 'path'
  | 'b64'
  | 'array'
  | 'list_models'
  | 'ping'
  | 'b64 (parse only)'
  | 'b64 + decode';

export interface ScenarioResult {
  id: string;
  transport: Transport;
  form: Form;
  latency: Distribution;
  /** p50 of this scenario minus the baseline's p50. */
  overhead_p50_ms: number;
  /** Median per call of (client time - worker-reported forward time): overhead without forward-pass jitter. */
  paired_overhead_p50_ms?: number;
  /** Median per call of (client time - server-reported total): MCP transport, SDK, client. */
  outside_gateway_ms?: number;
  /** Medians of the server-reported stage timings (decode, queue, transfer, compute, encode, total). */
  stages?: Record<string, number>;
  /** Medians of the client-side split: before the transport send, round trip, after the reply. */
  client?: Record<string, number>;
  /** Mean share of the machine's CPUs used by other processes while this scenario ran (%). */
  foreign_cpu_pct?: number;
  /** Blocks measured again because other processes were busy. */
  discarded_blocks: number;
}

export interface TargetResult {
  target: string;
  measured: number;
  /** The same figure with the worker-reported forward time subtracted per call instead of the baseline p50. */
  paired?: number;
  detail: string;
  met: boolean;
  /** b64 only: (b64 p50 - path p50) / echo p50, the cost of carrying the payload inline against the bare echo. */
  payload_vs_echo?: number;
}

export interface ProfileResults {
  /** The tensorgate server's main thread (node --cpu-prof), per scenario over that server. */
  server: Record<string, ProfileSummary>;
  /** This benchmark process: the MCP client (and the echo client), per scenario. */
  client: Record<string, ProfileSummary>;
}

export interface McpOverheadResult {
  benchmark: 'mcp-overhead';
  date: string;
  profiled: boolean;
  machine: MachineInfo;
  config: {
    model: string;
    threads: number;
    input: { shape: number[]; dtype: string; bytes: number; b64_chars: number; array_json_chars: number };
    iterations: number;
    array_iterations: number;
    warmup: number;
    rounds: number;
    gap_ms: number;
    max_foreign_cpu: number;
    foreign_cpu_pct_at_start: number | null;
    wall_s: number;
  };
  scenarios: ScenarioResult[];
  targets: Record<string, TargetResult>;
  codec: Record<string, number>;
  profile?: ProfileResults;
}
