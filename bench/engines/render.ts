import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/engines/run.ts writes, and its docs/benchmarks.md section. */

export interface EngineBlock {
  /** http: OIP v2 binary requests from another process; in-process: gateway.inferTensors, no HTTP front. */
  surface: 'http' | 'in-process';
  model: string;
  /** torch-fp32 (eager), torch-fp32-export, -compile, -aoti, torch-bf16, torch-int8, onnx-fp32. */
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
  rule?: string;
  error?: number;
  max_abs?: number;
  build_ms?: number;
  cached?: boolean;
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
  memory_mb: {
    model: string;
    torch_worker: number;
    export_worker: number;
    compile_worker: number;
    aoti_worker: number;
    onnx_in_gateway: number;
  }[];
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
  // The target: the image model (the larger, last) at concurrency 1, answers unchanged.
  const target = models.at(-1) as string;
  const one = Math.min(...concurrencies);
  const unchanged = (v: string) => {
    const acc = f.accuracy.find((a) => a.model === target && a.variant === v);
    return acc !== undefined && acc.argmax_agree === acc.rows;
  };
  const best = (surface: string) =>
    variants
      .filter((v) => v !== f.baseline && unchanged(v))
      .map((v) => ({ v, r: ratio(surface, target, v, one) }))
      .reduce((a, b) => (b.r > a.r ? b : a), { v: 'none', r: 0 });
  const bests = surfaces.map((s) => ({ s, ...best(s) }));
  const met = bests.some((b) => b.r >= f.target_ratio);
  const notes = f.variants
    .filter((v) => v.state !== 'ready' || v.reason)
    .map((v) => `- ${v.model} ${v.engine}-${v.precision} (${v.method}): ${v.state}${v.reason ? `, ${v.reason}` : ''}`);
  const built = f.variants
    .filter((v) => v.build_ms !== undefined && /compile|AOTInductor/.test(v.method))
    .map(
      (v) =>
        `| ${v.model} | ${v.method} | ${((v.build_ms as number) / 1000).toFixed(1)} | ${v.error?.toExponential(1) ?? '-'} |`,
    );
  // The compiled torch variants on their own: what fp32 gains without leaving PyTorch.
  const compiled = (surface: string) =>
    ['torch-fp32-compile', 'torch-fp32-aoti']
      .filter((v) => variants.includes(v) && unchanged(v))
      .map((v) => `${v} ${ratio(surface, target, v, one).toFixed(2)}x ${surface}`);
  return [
    '## Variants and engines (bench/engines)',
    '',
    `\`node --import tsx bench/engines/run.ts\`: each demo model's eager version (\`model.py\` + weights) registered with \`tensorgate register --export onnx\` and offering fp32, bf16 and int8, beside copies serving the same weights as the \`.pt2\` program (\`-export\`), with \`optimization.torch: compile\` (\`-compile\`: Inductor, frozen weights) and \`aoti\` (\`-aoti\`: an AOTInductor package compiled at load); every variant picked per request as a client picks it (\`precision\`, \`engine\`), all with the same batching (max 16 rows, 1 ms delay, adaptive) and one instance. \`http\`: OIP v2 binary requests from the benchmark process over keep-alive connections to a gateway process; \`in-process\`: the same requests handed to a gateway in the benchmark's own process, without the HTTP front that every variant pays alike. Closed loops, ${f.rounds} rounds of ${f.block_ms / 1000} s per variant, the variants taking turns. Accuracy: the largest |variant - torch fp32| and the rows with the same argmax, on 64 (tabular) or 4 (image) seeded rows. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    `| surface | model | concurrency | variant | req/s | vs ${f.baseline} | p50 / p99 ms | max abs diff, same argmax |`,
    '| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    '| model | eager worker RSS MB (fp32 + bf16 + int8) | .pt2 worker | compile worker | AOTInductor worker | onnx sessions in the gateway MB |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...f.memory_mb.map(
      (x) =>
        `| ${x.model} | ${x.torch_worker} | ${x.export_worker} | ${x.compile_worker} | ${x.aoti_worker} | ${x.onnx_in_gateway} |`,
    ),
    '',
    ...(built.length > 0
      ? [
          'What compiling cost at load (building, checking against eager fp32, warming up at batch sizes 1, 2 and 16; an AOTInductor package found in the cache loads instead):',
          '',
          '| model | variant | build s | error vs eager fp32 |',
          '| --- | --- | ---: | ---: |',
          ...built,
          '',
        ]
      : []),
    ...(notes.length > 0 ? ["What the variants' checks at load reported, besides ready:", '', ...notes, ''] : []),
    `Target: the best variant at least ${f.target_ratio}x the ${f.baseline} (eager) throughput on ${target} at concurrency ${one}, with every row's argmax unchanged; this run: ${bests.map((b) => `${b.v} ${b.r.toFixed(2)}x ${b.s}`).join(', ')} (${met ? 'met' : 'missed'}); compiled PyTorch alone: ${surfaces.flatMap(compiled).join(', ')}.`,
    '',
  ].join('\n');
}
