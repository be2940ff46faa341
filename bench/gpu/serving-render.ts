/** What bench/gpu/serving.py writes (gpu-serving-<time>.json), and its docs/benchmarks.md section. */

import { round } from '../mcp-overhead/stats.js';

/** Percentiles are null for a block in which no call fell inside the window. */
interface Latency {
  n: number;
  p50: number | null;
  p90: number | null;
  p99: number | null;
}

interface SequentialRow {
  latency: Latency;
  server_ms: Record<string, number>;
  over_raw_ms: number;
}

interface ConcurrentRow {
  rows_per_s: number;
  latency: Latency;
  gpu_utilization_percent: number | null;
  gpu_memory_used_mib: number | null;
  share_of_raw: number;
  /** The gateway's CPU per call, all threads and its main thread (absent in runs before them). */
  gateway_cpu_ms_per_call?: number | null;
  gateway_main_ms_per_call?: number | null;
}

export interface GpuServingFile {
  benchmark: 'gpu-serving';
  date: string;
  device: string;
  gpu: string | null;
  torch: string;
  cpus: number;
  config: {
    seconds: number;
    spin_us: number;
    /** The spin of the copy called again at concurrency 1 (absent or 0: no such rows). */
    wider_spin_us?: number;
    /** The CPUs of the copy placed by `resources.cpus` (absent or null: no such rows). */
    placed_cpus?: number[] | null;
    batching: string[];
    clients: string;
  };
  raw: { latency: Latency; batch32_ms: number; batch32_rows_per_s: number; direct_p50?: number };
  concurrency_1: Record<string, SequentialRow>;
  concurrency_32: Record<string, ConcurrentRow>;
  worker_gpu_memory_bytes: Record<string, number>;
  targets: { target: string; goal: string; measured: number; met: boolean }[];
  seconds: number;
}

const STAGES = ['decode_ms', 'queue_ms', 'transfer_ms', 'compute_ms', 'encode_ms', 'total_ms'];

export function renderGpuServing(files: unknown[]): string {
  const f = files.at(-1) as GpuServingFile;
  const where = f.gpu ? `${f.gpu}, ` : 'no GPU: a trial run, ';
  const memory = Object.entries(f.worker_gpu_memory_bytes)
    .map(([model, bytes]) => `${model} ${Math.round(bytes / 2 ** 20)} MiB`)
    .join(', ');
  return [
    '## Serving on a GPU (bench/gpu/serving.py)',
    '',
    `\`python3 bench/gpu/serving.py\`: the demo image model (\`.pt2\`, 1x3x224x224 float32) on \`${f.device}\` (${where}torch ${f.torch}, ${f.cpus} CPUs), workers spinning ${f.config.spin_us} µs${f.config.wider_spin_us ? ` (${f.config.wider_spin_us} µs in the rows that say so: the gateway waits awake only for answers within the spin)` : ''}${f.config.placed_cpus ? `; "worker on CPUs ${f.config.placed_cpus.join(',')}": a copy whose worker has those CPUs to itself (\`resources.cpus\`; the gateway and the client wherever the system puts them)` : ''}, against the raw forward in one process (host tensor in, \`.to(device)\`, forward, \`.cpu()\`): ${f.raw.latency.p50} ms p50 at batch 1, ${f.raw.batch32_rows_per_s} rows/s at batch 32. ${f.config.seconds} s per block; concurrency 32 from ${f.config.clients}, against copies with dynamic batching (max rows:delay µs:instances; \`:serial\`: the worker answers each pass before it begins the next, \`resources.pipeline\` off); _gateway CPU ms/call_ from /proc, of the whole process and of its main thread alone (the JavaScript thread every request passes through: 1000 / its ms per call bounds one gateway's calls per second). Run ${f.date.slice(0, 16).replace('T', ' ')} UTC, ${f.seconds} s.`,
    '',
    '| concurrency 1 | p50 ms | p90 ms | p99 ms | over raw ms | server stages: decode / queue / transfer / compute / encode / total ms |',
    '| --- | ---: | ---: | ---: | ---: | --- |',
    `| raw forward | ${f.raw.latency.p50} | ${f.raw.latency.p90} | ${f.raw.latency.p99} | | |`,
    ...(f.raw.direct_p50 !== undefined
      ? [
          `| raw forward, called as the worker calls it (python/tensorgate/_direct.py) | ${f.raw.direct_p50} | | | ${f.raw.latency.p50 === null ? '' : round(f.raw.direct_p50 - f.raw.latency.p50)} | |`,
        ]
      : []),
    ...Object.entries(f.concurrency_1).map(
      ([form, r]) =>
        `| \`${form}\` | ${r.latency.p50} | ${r.latency.p90} | ${r.latency.p99} | ${r.over_raw_ms} | ${STAGES.map((k) => r.server_ms[k] ?? '-').join(' / ')} |`,
    ),
    '',
    '| concurrency 32 (batching, form) | rows/s | share of raw batch 32 | p50 ms | p99 ms | GPU utilisation % | GPU memory MiB | gateway CPU ms/call | its main thread ms/call |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...Object.entries(f.concurrency_32).map(
      ([key, r]) =>
        `| \`${key}\` | ${r.rows_per_s} | ${r.share_of_raw} | ${r.latency.p50 ?? '-'} | ${r.latency.p99 ?? '-'} | ${r.gpu_utilization_percent ?? '-'} | ${r.gpu_memory_used_mib ?? '-'} | ${r.gateway_cpu_ms_per_call ?? '-'} | ${r.gateway_main_ms_per_call ?? '-'} |`,
    ),
    '',
    ...(memory ? [`Workers' GPU memory (\`/metrics\`): ${memory}.`, ''] : []),
    '| target | goal | measured | met |',
    '| --- | --- | ---: | --- |',
    ...f.targets.map((t) => `| ${t.target} | ${t.goal} | ${t.measured} | ${t.met ? 'yes' : '**no**'} |`),
    '',
  ].join('\n');
}
