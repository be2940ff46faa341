import { LABELS, type PeerBlock, type PeersResult } from './results.js';

/** The docs/benchmarks.md section of bench/peers, rendered from its newest result file. */

const isTensorgate = (b: PeerBlock) => b.system.startsWith('tensorgate-');
const isMcp = (b: PeerBlock) => b.system.startsWith('tensorgate-mcp-');
const isPeer = (b: PeerBlock) => b.system !== 'raw' && !isTensorgate(b);

/** x / y with two significant digits below 0.1 (serving a 10 µs forward costs orders of magnitude). */
function ratio(x: number, y: number | undefined): string {
  if (!y) return '–';
  const r = x / y;
  return `${r >= 0.1 ? r.toFixed(2) : r.toPrecision(2)}x`;
}
const ms = (v: number) => v.toFixed(2);

/** The block with the highest throughput; ties go to the lower p99. */
function best(blocks: PeerBlock[]): PeerBlock | undefined {
  return [...blocks].sort((a, b) => b.throughput - a.throughput || a.latency.p99 - b.latency.p99)[0];
}

function targets(r: PeersResult): string[] {
  const lines = ['### Targets', '', '| target | measured | met |', '| --- | --- | ---: |'];
  const image = r.blocks.filter((b) => b.model === 'image');
  const raw = image.find((b) => b.system === 'raw');
  const mcp = image.filter((b) => isMcp(b) && b.concurrency === 1).sort((a, b) => a.latency.p50 - b.latency.p50);
  if (raw && mcp.length) {
    const over = mcp.map((b) => `${LABELS[b.system]} +${ms(b.latency.p50 - raw.latency.p50)} ms`).join('; ');
    const met = (mcp[0] as PeerBlock).latency.p50 - raw.latency.p50 <= 1.5;
    lines.push(
      `| tensorgate MCP at concurrency 1 within 1.5 ms of raw PyTorch, image model (p50) | raw ${ms(raw.latency.p50)} ms; ${over} | ${met ? 'yes' : '**no**'} |`,
    );
  }
  const top = Math.max(...r.config.concurrency);
  for (const model of r.config.models) {
    const row = r.blocks.filter((b) => b.model === model && b.concurrency === top);
    const tg = best(row.filter(isTensorgate));
    const peer = best(row.filter(isPeer));
    if (!tg || !peer) continue;
    const met = tg.throughput > peer.throughput && tg.latency.p99 <= peer.latency.p99;
    lines.push(
      `| ${model}, concurrency ${top}: tensorgate's best ahead of every peer on throughput, p99 equal or lower | ${LABELS[tg.system]} ${tg.throughput}/s, p99 ${ms(tg.latency.p99)} ms; best peer ${LABELS[peer.system]} ${peer.throughput}/s, p99 ${ms(peer.latency.p99)} ms (${ratio(tg.throughput, peer.throughput)} the throughput) | ${met ? 'yes' : '**no**'} |`,
    );
  }
  return [...lines, ''];
}

export function renderPeers(files: unknown[]): string {
  const r = files.at(-1) as PeersResult;
  const m = r.machine;
  const versions = Object.entries(r.peers)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const lines = [
    '## Peers (bench/peers)',
    '',
    `\`bash bench/peers/run.sh\` (set-up, the peers into .tensorgate/peers, the run, this page; ${r.duration_s} s of measuring here): every system serves the same TorchScript file (version 1 of the demo models) alone on the machine, with the same torch and thread count; closed-loop clients in one Node process send the same one-row input for ${r.config.seconds} s per block after a ${r.config.warmup_ms} ms warm-up, one MCP session or keep-alive connection per client (tensorgate over stdio: one client, the calls in flight together). Batching where the system has it: max ${r.config.batching.max_batch_size} rows, ${r.config.batching.max_queue_delay_us / 1000} ms. Every system logs as it does by default. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, peers: ${versions || 'not installed'}; commit ${m.commit}, run ${r.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    '_n_: requests answered in the measured time (a system slower than a few per second has too few for its p99 to mean much). _over raw_: p50 minus the raw forward p50. _÷ raw_: throughput over the raw forward run back to back (one at a time). _÷ tensorgate_: throughput over the best tensorgate row at that concurrency. _client CPU_: the load generator itself, 100% = one core, on the same 2 cores as the servers.',
    '',
    '![Throughput against p99 latency per system and concurrency](images/peers.png)',
    '',
    ...targets(r),
  ];
  if (r.skipped.length)
    lines.push(
      '### Not measured',
      '',
      ...r.skipped.map((s) => `- ${LABELS[s.system]}${s.model ? ` (${s.model})` : ''}: ${s.reason}`),
      '',
    );
  for (const model of r.config.models) {
    const blocks = r.blocks.filter((b) => b.model === model);
    const raw = blocks.find((b) => b.system === 'raw');
    for (const concurrency of r.config.concurrency) {
      const row = blocks.filter((b) => b.concurrency === concurrency && b.system !== 'raw');
      const tg = best(row.filter(isTensorgate));
      lines.push(
        `### ${model}, concurrency ${concurrency}`,
        '',
        '| system | n | p50 ms | p90 ms | p99 ms | req/s | over raw ms | ÷ raw | ÷ tensorgate | client CPU |',
        '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
        ...(concurrency === 1 && raw
          ? [
              `| ${LABELS.raw} | ${raw.latency.n} | ${ms(raw.latency.p50)} | ${ms(raw.latency.p90)} | ${ms(raw.latency.p99)} | ${raw.throughput} | 0 | 1.00x | – | – |`,
            ]
          : []),
        ...row.map(
          (b) =>
            `| ${LABELS[b.system]} | ${b.latency.n} | ${ms(b.latency.p50)} | ${ms(b.latency.p90)} | ${ms(b.latency.p99)} | ${b.throughput} | ${raw ? ms(b.latency.p50 - raw.latency.p50) : '–'} | ${ratio(b.throughput, raw?.throughput)} | ${ratio(b.throughput, tg?.throughput)} | ${b.client_cpu_percent}% |`,
        ),
        '',
      );
    }
  }
  return lines.join('\n');
}
