import type { PeerBlock, PeersResult } from './results.js';

/** The docs/benchmarks.md section of bench/peers, rendered from its newest result file. */

const LABELS: Record<PeerBlock['system'], string> = {
  raw: 'raw PyTorch (in process)',
  'tensorgate-mcp': 'tensorgate MCP HTTP, b64',
  'tensorgate-oip': 'tensorgate OIP v2, binary',
  kserve: 'KServe OIP v2, binary',
  'mcp-list': 'FastMCP, JSON list (the user report)',
  litserve: 'LitServe HTTP, batching',
};

function ratio(x: number, y: number | undefined): string {
  return y ? `${(x / y).toFixed(2)}x` : '–';
}

export function renderPeers(files: unknown[]): string {
  const r = files.at(-1) as PeersResult;
  const m = r.machine;
  const lines = [
    '## Peers (bench/peers)',
    '',
    `\`bash bench/peers/setup-peers.sh && node --import tsx bench/peers/run.ts\`: each system serves the same TorchScript file (version 1 of the demo models) alone, with the same torch and thread count; closed-loop clients in one Node process send the same one-row input for ${r.config.seconds} s per block after a ${r.config.warmup_ms} ms warm-up. Batching where the system has it: max ${r.config.batching.max_batch_size} rows, ${r.config.batching.max_queue_delay_us / 1000} ms. Every system logs as it does by default. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${r.date.slice(0, 16).replace('T', ' ')} UTC. Client CPU is the load generator's own use (100% = one core).`,
    '',
    "Not yet measured here: KServe and Ray Serve (both install, in .tensorgate/peers), LitServe's MCP endpoint, tensorgate over stdio and shared memory; bench/oip has tensorgate against KServe over OIP v2.",
    '',
  ];
  for (const model of r.config.models) {
    const blocks = r.blocks.filter((b) => b.model === model);
    const raw = blocks.find((b) => b.system === 'raw');
    for (const concurrency of r.config.concurrency) {
      const row = blocks.filter((b) => b.concurrency === concurrency && b.system !== 'raw');
      const tg = row.find((b) => b.system === 'tensorgate-oip');
      lines.push(
        `### ${model}, concurrency ${concurrency}`,
        '',
        '| system | p50 ms | p90 ms | p99 ms | req/s | p50 over raw ms | req/s vs tensorgate OIP | client CPU |',
        '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
        ...(concurrency === 1 && raw
          ? [
              `| ${LABELS.raw} | ${raw.latency.p50} | ${raw.latency.p90} | ${raw.latency.p99} | ${raw.throughput} | 0 | – | – |`,
            ]
          : []),
        ...row.map(
          (b) =>
            `| ${LABELS[b.system]} | ${b.latency.p50} | ${b.latency.p90} | ${b.latency.p99} | ${b.throughput} | ${raw ? (b.latency.p50 - raw.latency.p50).toFixed(3) : '–'} | ${ratio(b.throughput, tg?.throughput)} | ${b.client_cpu_percent}% |`,
        ),
        '',
      );
    }
  }
  return lines.join('\n');
}
