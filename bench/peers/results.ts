import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/peers/run.ts writes to bench/results/peers-<time>.json. */

export const SYSTEMS = [
  'raw',
  'tensorgate-mcp-stdio-path',
  'tensorgate-mcp-stdio-b64',
  'tensorgate-mcp-http-path',
  'tensorgate-mcp-http-b64',
  'tensorgate-oip-json',
  'tensorgate-oip-binary',
  'tensorgate-oip-shm',
  'kserve-oip-binary',
  'fastmcp-list',
  'litserve-http',
  'litserve-mcp',
  'ray-serve-http',
] as const;

export type SystemId = (typeof SYSTEMS)[number];

/** How tables and the plot name each system. */
export const LABELS: Record<SystemId, string> = {
  raw: 'raw PyTorch (in process)',
  'tensorgate-mcp-stdio-path': 'tensorgate MCP stdio, path',
  'tensorgate-mcp-stdio-b64': 'tensorgate MCP stdio, b64',
  'tensorgate-mcp-http-path': 'tensorgate MCP HTTP, path',
  'tensorgate-mcp-http-b64': 'tensorgate MCP HTTP, b64',
  'tensorgate-oip-json': 'tensorgate OIP v2, JSON',
  'tensorgate-oip-binary': 'tensorgate OIP v2, binary',
  'tensorgate-oip-shm': 'tensorgate OIP v2, shared memory',
  'kserve-oip-binary': 'KServe OIP v2, binary',
  'fastmcp-list': 'FastMCP, JSON list (the user report)',
  'litserve-http': 'LitServe HTTP, batching',
  'litserve-mcp': 'LitServe MCP',
  'ray-serve-http': 'Ray Serve HTTP, @serve.batch',
};

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
  /** The peers' versions, as installed in .tensorgate/peers. */
  peers: Record<string, string>;
  config: {
    models: string[];
    concurrency: number[];
    seconds: number;
    warmup_ms: number;
    batching: { max_batch_size: number; max_queue_delay_us: number };
    systems: SystemId[];
  };
  /** Systems asked for and not measured, with why (a peer that would not install or start). */
  skipped: { system: SystemId; model?: string; reason: string }[];
  blocks: PeerBlock[];
  /** Wall time of the whole run, seconds. */
  duration_s: number;
}
