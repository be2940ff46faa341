import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/processing/run.ts writes to bench/results/processing-<time>.json. */

export const SYSTEMS = [
  'raw',
  'tensorgate-tool-stdio',
  'tensorgate-tool-http',
  'litserve-http',
  'litserve-mcp',
  'fastmcp-tool',
] as const;

export type SystemId = (typeof SYSTEMS)[number];

export const LABELS: Record<SystemId, string> = {
  raw: 'raw: Pillow + transforms + forward in one process',
  'tensorgate-tool-stdio': "tensorgate, the model's tool over MCP stdio",
  'tensorgate-tool-http': "tensorgate, the model's tool over MCP Streamable HTTP",
  'litserve-http': 'LitServe HTTP, decode_request + batching',
  'litserve-mcp': 'LitServe MCP endpoint',
  'fastmcp-tool': 'FastMCP tool doing the pipeline in the call',
};

export interface ProcessingBlock {
  system: SystemId;
  concurrency: number;
  latency: Distribution;
  /** Images per second over the measured time. */
  throughput: number;
  client_cpu_percent: number;
}

export interface ProcessingResult {
  benchmark: 'processing';
  date: string;
  machine: MachineInfo;
  config: {
    concurrency: number[];
    seconds: number;
    warmup_ms: number;
    batching: { max_batch_size: number; max_queue_delay_us: number };
    processing: unknown;
    photo: string;
    systems: SystemId[];
  };
  /** Images per second of one Python process decoding 16 images and running them as one batch. */
  raw_batched_images_per_s?: number;
  /** The photo's top 5 labels from the raw pipeline and from tensorgate's processing. */
  answers: { raw: string[]; tensorgate: string[] };
  /** Per tensorgate system, the median of its own stage timings over quiet calls. */
  stages: Record<string, Record<string, number>>;
  /**
   * Per tensorgate system, the gateway process's CPU per image over sequential calls after its
   * blocks: all its threads, and its main thread (the one every request passes through).
   */
  gateway_cpu?: Record<string, { calls: number; ms_per_image: number; main_ms_per_image: number }>;
  skipped: { system: SystemId; reason: string }[];
  blocks: ProcessingBlock[];
  targets: { target: string; goal: string; measured: number; allowed: number; met: boolean }[];
  duration_s: number;
}
