import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/engines/run.ts writes, and its docs/benchmarks.md section. */

export interface EngineBlock {
  /** http: OIP v2 binary requests from another process; in-process: gateway.inferTensors, no HTTP front. */
  surface: 'http' | 'in-process';
  model: string;
  /** torch-fp32, torch-fp32-optimized, torch-bf16, torch-int8, onnx-fp32. */
  variant: string;
  concurrency: number;
  /** Requests per second, the mean of the rounds. */
  throughput: number;
  /** Latencies of the round with the median p50. */
  latency_ms: Distribution;
}

export interface Accuracy {
  model: string;
  variant: string;
  rows: number;
  /** Largest |variant - torch fp32| over the rows' outputs. */
  max_abs_diff: number;
  /** Rows whose argmax is the same as torch fp32's. */
  argmax_agree: number;
}

/** One variant as describe_model reports it after its check at load. */
export interface VariantNote {
  model: string;
  precision: string;
  engine: string;
  method: string;
  state: string;
  reason?: string;
  max_abs?: number;
  latency_ms?: number;
}

export interface EnginesFile {
  benchmark: 'engines';
  date: string;
  machine: MachineInfo;
  block_ms: number;
  rounds: number;
  baseline: string;
  blocks: EngineBlock[];
  accuracy: Accuracy[];
  /** Resident memory: the torch workers' (from /metrics), and what loading the onnx sessions added to the gateway's. */
  memory_mb: { model: string; torch_worker: number; torch_worker_optimized: number; onnx_in_gateway: number }[];
  variants: VariantNote[];
  target_ratio: number;
}

export function renderEngines(files: unknown[]): string {
  const f = (files as Partial<EnginesFile>[]).filter((x) => x.baseline !== undefined).at(-1) as EnginesFile | undefined;
  if (!f)
    return '## Variants and engines (bench/engines)\n\nNo run with variants yet: `node --import tsx bench/engines/run.ts`.\n';
  const m = f.machine;
  const block = (surface: string, model: string, variant: string, c: number) =>
    f.blocks.find((b) => b.surface === surface && b.model === model && b.variant === variant && b.concurrency === c);
  const models = [...new Set(f.blocks.map((b) => b.model))];
  const variants = [...new Set(f.blocks.map((b) => b.variant))];
  const concurrencies = [...new Set(f.blocks.map((b) => b.concurrency))];
  const surfaces = [...new Set(f.blocks.map((b) => b.surface))];
  const ratio = (surface: string, model: string, variant: string, c: number) => {
    const base = block(surface, model, f.baseline, c);
    const other = block(surface, model, variant, c);
    return base && other ? other.throughput / base.throughput : 0;
  };
  const rows = surfaces.flatMap((surface) =>
    models.flatMap((model) =>
      concurrencies.flatMap((c) =>
        variants.map((variant) => {
          const b = block(surface, model, variant, c);
          const acc = f.accuracy.find((a) => a.model === model && a.variant === variant);
          const delta =
            variant === f.baseline
              ? 'baseline'
              : acc
                ? `${acc.max_abs_diff.toExponential(1)}, ${acc.argmax_agree}/${acc.rows}`
                : '-';
          return `| ${surface} | ${model} | ${c} | ${variant} | ${b?.throughput ?? '-'} | ${ratio(surface, model, variant, c).toFixed(2)}x | ${b?.latency_ms.p50} / ${b?.latency_ms.p99} | ${delta} |`;
        }),
      ),
    ),
  );
  const small = models[0] as string;
  const top = Math.max(...concurrencies);
  const best = (surface: string) =>
    variants
      .filter((v) => v !== f.baseline)
      .map((v) => ({ v, r: ratio(surface, small, v, top) }))
      .reduce((a, b) => (b.r > a.r ? b : a));
  const bests = surfaces.map((s) => ({ s, ...best(s) }));
  const met = bests.some((b) => b.r >= f.target_ratio);
  const notes = f.variants
    .filter((v) => v.state !== 'ready' || v.reason)
    .map((v) => `- ${v.model} ${v.engine}-${v.precision} (${v.method}): ${v.state}${v.reason ? `, ${v.reason}` : ''}`);
  return [
    '## Variants and engines (bench/engines)',
    '',
    `\`node --import tsx bench/engines/run.ts\`: each demo model registered with \`tensorgate register --export onnx\` and offering fp32, bf16 and int8, plus a copy with \`optimization.torch: optimize_for_inference\`; every variant picked per request as a client picks it (\`precision\`, \`engine\`), all with the same batching (max 16 rows, 1 ms delay, adaptive) and one instance. \`http\`: OIP v2 binary requests from the benchmark process over keep-alive connections to a gateway process; \`in-process\`: the same requests handed to a gateway in the benchmark's own process, without the HTTP front that every variant pays alike. Closed loops, ${f.rounds} rounds of ${f.block_ms / 1000} s per variant, the variants taking turns. Accuracy: the largest |variant - torch fp32| and the rows with the same argmax, on 64 (tabular) or 4 (image) seeded rows. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    `| surface | model | concurrency | variant | req/s | vs ${f.baseline} | p50 / p99 ms | max abs diff, same argmax |`,
    '| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    '| model | torch worker RSS MB (fp32 + bf16 + int8) | optimized worker RSS MB | onnx sessions in the gateway MB |',
    '| --- | ---: | ---: | ---: |',
    ...f.memory_mb.map(
      (x) => `| ${x.model} | ${x.torch_worker} | ${x.torch_worker_optimized} | ${x.onnx_in_gateway} |`,
    ),
    '',
    ...(notes.length > 0 ? ["What the variants' checks at load reported, besides ready:", '', ...notes, ''] : []),
    `Target: the best variant at least ${f.target_ratio}x the ${f.baseline} throughput on the small model at concurrency ${top}; this run: ${bests.map((b) => `${b.v} ${b.r.toFixed(2)}x ${b.s}`).join(', ')} (${met ? 'met' : 'missed'}).`,
    '',
  ].join('\n');
}
