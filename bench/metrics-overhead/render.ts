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
  /** Runs from before the request log was measured have none. */
  logging?: {
    on: { median_of_round_p50s: number; round_p50s: number[]; p99: number };
    off: { median_of_round_p50s: number; round_p50s: number[]; p99: number };
    overhead_us: number;
    overhead_percent: number;
    log_record_us: number;
  };
}

export function renderMetricsOverhead(files: unknown[]): string {
  const r = files.at(-1) as MetricsOverheadResult;
  const m = r.machine;
  return [
    '## Metrics overhead (bench/metrics-overhead)',
    '',
    `\`node --import tsx bench/metrics-overhead/run.ts\`: one gateway in the benchmark process with its real worker, the small tabular model, sequential one-row calls through \`Gateway.inferTensors\` (the OIP path, where the metrics are the largest share of a call), ${r.config.calls} calls per block, metrics on and off (and the request log on, below) interleaved over ${r.config.rounds} rounds. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${r.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    '| metrics | p50 ms (median of rounds) | round p50s ms | p99 ms |',
    '| --- | ---: | ---: | ---: |',
    `| on | ${r.on.median_of_round_p50s} | ${r.on.round_p50s.join(' / ')} | ${r.on.p99} |`,
    `| off | ${r.off.median_of_round_p50s} | ${r.off.round_p50s.join(' / ')} | ${r.off.p99} |`,
    '',
    `Overhead: **${r.overhead_us} µs per request (${r.overhead_percent}%)**; \`recordSuccess\` alone (every counter and histogram a request updates) takes ${r.record_success_us} µs in a tight loop. Target: within 2% or 20 µs per request.`,
    '',
    ...(r.logging ? loggingSection(r.logging) : []),
  ].join('\n');
}

function loggingSection(l: NonNullable<MetricsOverheadResult['logging']>): string[] {
  return [
    'The request log in the same run (metrics on in both): one JSON record per request at `--log-level info`, written asynchronously to /dev/null, against `--log-level warn`, where a request costs one level check.',
    '',
    '| request log | p50 ms (median of rounds) | round p50s ms | p99 ms |',
    '| --- | ---: | ---: | ---: |',
    `| info | ${l.on.median_of_round_p50s} | ${l.on.round_p50s.join(' / ')} | ${l.on.p99} |`,
    `| warn | ${l.off.median_of_round_p50s} | ${l.off.round_p50s.join(' / ')} | ${l.off.p99} |`,
    '',
    `Overhead: **${l.overhead_us} µs per request (${l.overhead_percent}%)**; one request record alone takes ${l.log_record_us} µs in a tight loop.`,
    '',
  ];
}
