/** The docs/benchmarks.md section of bench/metrics-overhead, rendered from its result files. */

interface MetricsOverheadResult {
  date: string;
  machine: { cores: number; cpu_model: string; node: string; commit: string };
  config: { calls: number; rounds: number };
  on: { median_of_round_p50s: number; round_p50s: number[]; p99: number };
  off: { median_of_round_p50s: number; round_p50s: number[]; p99: number };
  overhead_us: number;
  overhead_percent: number;
  record_success_us: number;
  /** Runs since the recent-request window and the CPU figures. */
  window_record_us?: number;
  cpu_us_per_call?: { with: number; without: number };
  cpu_overhead_us?: number;
  cpu_overhead_percent?: number;
  /** Runs from before the request log was measured have none. */
  logging?: {
    on: { median_of_round_p50s: number; round_p50s: number[]; p99: number };
    off: { median_of_round_p50s: number; round_p50s: number[]; p99: number };
    overhead_us: number;
    overhead_percent: number;
    log_record_us: number;
    cpu_us_per_call?: { with: number; without: number };
    cpu_overhead_us?: number;
    cpu_overhead_percent?: number;
  };
  /** Runs since the scrape was measured. */
  scrape?: {
    scrapes: number;
    processes_read: number;
    call_alone_ms: Spread;
    call_during_scrape_ms: Spread;
    scrape_ms: Spread;
    loop_wait_ms: Spread;
    sync_rollup_read_ms: Spread;
  };
  /** Runs since nvidia-smi's runs were measured. */
  gpu_sampling?: {
    samples: number;
    rss_mb: number;
    call_alone_ms: Spread;
    call_during_exec_file_ms: Spread;
    call_during_shell_ms: Spread;
    loop_wait_exec_file_ms: Spread;
    loop_wait_shell_ms: Spread;
  };
}

interface Spread {
  p50: number;
  max: number;
}

type Mode = { median_of_round_p50s: number; round_p50s: number[]; p99: number };

/** The two modes of one comparison, side by side. */
function table(what: string, ...rows: [string, Mode][]): string[] {
  return [
    `| ${what} | p50 ms (median of rounds) | round p50s ms | p99 ms |`,
    '| --- | ---: | ---: | ---: |',
    ...rows.map(([label, m]) => row(label, m)),
  ];
}

/** Many rounds: their p50s as a range, not a list. */
function row(label: string, m: Mode): string {
  const range =
    m.round_p50s.length > 8 ? `${Math.min(...m.round_p50s)} to ${Math.max(...m.round_p50s)}` : m.round_p50s.join(' / ');
  return `| ${label} | ${m.median_of_round_p50s} | ${range} | ${m.p99} |`;
}

/** This process's CPU time per call, with and without: what the work costs when latency hides it. */
function cpu(x: {
  cpu_us_per_call?: { with: number; without: number };
  cpu_overhead_us?: number;
  cpu_overhead_percent?: number;
}): string {
  if (!x.cpu_us_per_call) return '';
  return ` of latency; gateway CPU ${x.cpu_us_per_call.with} µs against ${x.cpu_us_per_call.without} µs per call, **${x.cpu_overhead_us} µs (${x.cpu_overhead_percent}%)**`;
}

/** Runs since the paired estimate say so; older ones took the difference of the two medians. */
function differenceOf(r: MetricsOverheadResult): string {
  return r.config.rounds > 8 ? "median of the rounds' paired differences" : 'difference of the medians';
}

export function renderMetricsOverhead(files: unknown[]): string {
  const r = files.at(-1) as MetricsOverheadResult;
  const m = r.machine;
  return [
    '## Metrics overhead (bench/metrics-overhead)',
    '',
    `\`node --import tsx bench/metrics-overhead/run.ts\`: one gateway in the benchmark process with its real worker, the small tabular model, sequential one-row calls through \`Gateway.inferTensors\` (the OIP path, where the metrics are the largest share of a call), ${r.config.calls} calls per block, interleaved over ${r.config.rounds} rounds: metrics (Prometheus and the recent-request window) on against off, then the request log on against off, in two phases. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${r.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    ...table('metrics', ['on', r.on], ['off', r.off]),
    '',
    `Overhead (${differenceOf(r)}): **${r.overhead_us} µs per request (${r.overhead_percent}%)**${cpu(r)}; \`recordSuccess\` alone (every counter and histogram a request updates) takes ${r.record_success_us} µs in a tight loop${r.window_record_us !== undefined ? `, a window record ${r.window_record_us} µs` : ''}. Target: within 2% or 20 µs per request.`,
    '',
    ...(r.logging ? loggingSection(r.logging) : []),
    ...(r.scrape ? scrapeSection(r.scrape) : []),
    ...(r.gpu_sampling ? gpuSamplingSection(r.gpu_sampling) : []),
  ].join('\n');
}

function loggingSection(l: NonNullable<MetricsOverheadResult['logging']>): string[] {
  return [
    'The request log in the same run (metrics on in both): one JSON record per request at `--log-level info`, written asynchronously to /dev/null, against `--log-level warn`, where a request costs one level check.',
    '',
    ...table('request log', ['info', l.on], ['warn', l.off]),
    '',
    `Overhead: **${l.overhead_us} µs per request (${l.overhead_percent}%)**${cpu(l)}; one request record alone takes ${l.log_record_us} µs in a tight loop.`,
    '',
  ];
}

/** Measures as rows of p50 and max. */
function spreads(...rows: [string, Spread][]): string[] {
  return [
    '| measure | p50 ms | max ms |',
    '| --- | ---: | ---: |',
    ...rows.map(([label, x]) => `| ${label} | ${x.p50} | ${x.max} |`),
  ];
}

function scrapeSection(s: NonNullable<MetricsOverheadResult['scrape']>): string[] {
  return [
    `A scrape of \`/metrics\` in the same run, ${s.scrapes} times, each more than a second after the last, so that each reads the \`/proc/PID/smaps_rollup\` of the ${s.processes_read} processes (the workers of every demo model and their fork server) afresh: a call alone, the scrape alone, a call in flight when a scrape begins, and how long a timer set as the scrape begins waits for the event loop. Each call comes after a second without one, so the worker wakes cold: slower than the calls above. For scale, the same ${s.processes_read} files read synchronously on this thread, as a scrape read them before \`src/metrics/process-memory.ts\` ([metrics.md](metrics.md)).`,
    '',
    ...spreads(
      ['call alone', s.call_alone_ms],
      ['call in flight during a scrape', s.call_during_scrape_ms],
      ['scrape', s.scrape_ms],
      ['event loop wait as a scrape begins', s.loop_wait_ms],
      [`reading the ${s.processes_read} rollups synchronously`, s.sync_rollup_read_ms],
    ),
    '',
    `A call in flight during a scrape takes ${round2(s.call_during_scrape_ms.p50 / s.call_alone_ms.p50)}x a call alone at p50; the event loop waits ${s.loop_wait_ms.p50} ms, against the ${s.sync_rollup_read_ms.p50} ms the synchronous reads alone would hold it.`,
    '',
  ];
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

function gpuSamplingSection(g: NonNullable<MetricsOverheadResult['gpu_sampling']>): string[] {
  return [
    `nvidia-smi as the GPU sampler runs it (twice every 5 s on a GPU host), in the same run: a stand-in script answering the per-GPU query, ${g.samples} runs each way with a call in flight, started by \`execFile\` (a fork of the ${g.rss_mb} MB benchmark process, as the sampler did before) and through the sampler's long-lived shell (\`src/metrics/command-shell.ts\`), and how long a timer set as each run begins waits for the event loop.`,
    '',
    ...spreads(
      ['call alone', g.call_alone_ms],
      ['call in flight, nvidia-smi by execFile', g.call_during_exec_file_ms],
      ['call in flight, nvidia-smi through the shell', g.call_during_shell_ms],
      ['event loop wait, execFile', g.loop_wait_exec_file_ms],
      ['event loop wait, the shell', g.loop_wait_shell_ms],
    ),
    '',
  ];
}
