import type { OipResult } from './results.js';

/** The docs/benchmarks.md section of bench/oip, rendered from its result files. */

const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
const header = (cells: string[], text = 1) => `${row(cells)}\n${row(cells.map((_, i) => (i < text ? '---' : '---:')))}`;
const when = (date: string) => date.slice(0, 16).replace('T', ' ');

const FORM = {
  json: 'v2 JSON (`data` as a list)',
  binary: 'v2 binary tensor data (in and out)',
  shm: 'v2 system shared memory (in and out)',
} as const;

export function renderOip(files: unknown[]): string {
  const runs = files as OipResult[];
  const r = runs.at(-1) as OipResult;
  const m = r.machine;
  const lines = [
    '## OIP v2 data plane (bench/oip)',
    '',
    '`node --import tsx bench/oip/run.ts`: the real server (`tensorgate serve --http`) with version 1 of the demo models and `tabular_batched`, a copy of the small model with dynamic batching on (max 64 rows, 0.5 ms queue delay); closed-loop clients in one Node process (node:http, keep-alive) send one row to the small tabular model and to the image model (v1, TorchScript, 2 threads) as v2 JSON, as binary tensor data and through system shared memory; ' +
      `${r.config.seconds} s per block after ${r.config.warmup_s} s of warm-up, forms interleaved over ${r.config.rounds} rounds (the round with the median p50 is shown). ` +
      '_overhead_ = p50 - the raw TorchScript forward p50 in one Python process on the same input (bench/mcp-overhead/baseline.py), measured in the same run.',
    '',
    `${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}; commit ${m.commit}; run ${when(r.date)} UTC.`,
    '',
    `Raw forward p50: tabular ${r.raw_forward.tabular?.p50} ms, image ${r.raw_forward.image?.p50} ms.`,
    '',
    header(
      [
        'model',
        'concurrency',
        'form',
        'p50 ms',
        'p90 ms',
        'p99 ms',
        'overhead p50 ms',
        'calls/s',
        'errors',
        'client CPU %',
      ],
      3,
    ),
  ];
  for (const b of r.blocks)
    lines.push(
      row([
        b.model,
        b.concurrency,
        FORM[b.form],
        b.latency.p50,
        b.latency.p90,
        b.latency.p99,
        b.p50_overhead_ms,
        b.throughput,
        b.errors,
        b.client_cpu_percent,
      ]),
    );
  const best = (server: string, model: string, c: number) =>
    Math.max(
      0,
      ...r.blocks
        .filter((b) => (b.server ?? 'tensorgate') === server && b.model === model && b.concurrency === c)
        .map((b) => b.throughput),
    );
  const top = Math.max(...r.config.concurrency);
  const ratios = (['tabular', 'image'] as const)
    .filter((model) => best('kserve', model, top) > 0)
    .map((model) => `${model} ${(best('tensorgate', model, top) / best('kserve', model, top)).toFixed(2)}x`);
  if (best('tensorgate', 'tabular_batched', top) > 0 && best('kserve', 'tabular', top) > 0)
    ratios.push(
      `tabular with tensorgate's dynamic batching on ${(best('tensorgate', 'tabular_batched', top) / best('kserve', 'tabular', top)).toFixed(2)}x`,
    );
  if (ratios.length)
    lines.push(
      '',
      `Throughput at concurrency ${top}, tensorgate's best form over the KServe model server's best (its JSON or binary input; it answers binary requests with JSON outputs): ${ratios.join(', ')}.`,
    );
  lines.push(
    '',
    'Targets: binary p50 overhead over the raw forward at most 0.5 ms for the small model; shared memory close to binary minus the copy; throughput at concurrency 16 at least 2x the KServe model server (kserve 0.21, bench/oip/kserve_server.py: the same TorchScript file, torch and thread count, `inference_mode`; installed by bench/peers/setup-peers.sh; measured after tensorgate is stopped).',
    '',
  );
  return lines.join('\n');
}
