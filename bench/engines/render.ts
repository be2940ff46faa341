import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/engines/run.ts writes, and its docs/benchmarks.md section. */

export type EngineName = 'torch' | 'onnx';

export interface EngineBlock {
  /** http: OIP v2 binary requests from another process; in-process: gateway.inferTensors, no HTTP front. */
  surface: 'http' | 'in-process';
  model: string;
  engine: EngineName;
  concurrency: number;
  /** Requests per second, the mean of the rounds. */
  throughput: number;
  /** Latencies of every round together. */
  latency_ms: Distribution;
}

export interface Accuracy {
  model: string;
  rows: number;
  max_abs_diff: number;
  /** Rows whose argmax is the same for both engines. */
  argmax_agree: number;
}

export interface EnginesFile {
  benchmark: 'engines';
  date: string;
  machine: MachineInfo;
  block_ms: number;
  rounds: number;
  blocks: EngineBlock[];
  accuracy: Accuracy[];
  /** Resident memory: the torch workers' (from /metrics), and what loading the onnx sessions added to the gateway's. */
  memory_mb: { model: string; torch_worker: number; onnx_in_gateway: number }[];
  target_ratio: number;
}

export function renderEngines(files: unknown[]): string {
  const f = files.at(-1) as EnginesFile;
  const m = f.machine;
  const block = (surface: string, model: string, engine: EngineName, concurrency: number) =>
    f.blocks.find(
      (b) => b.surface === surface && b.model === model && b.engine === engine && b.concurrency === concurrency,
    );
  const models = [...new Set(f.blocks.map((b) => b.model))];
  const concurrencies = [...new Set(f.blocks.map((b) => b.concurrency))];
  const surfaces = [...new Set(f.blocks.map((b) => b.surface))];
  const ratio = (surface: string, model: string, c: number) => {
    const torch = block(surface, model, 'torch', c);
    const onnx = block(surface, model, 'onnx', c);
    return torch && onnx ? onnx.throughput / torch.throughput : 0;
  };
  const rows = surfaces.flatMap((surface) =>
    models.flatMap((model) =>
      concurrencies.map((c) => {
        const torch = block(surface, model, 'torch', c);
        const onnx = block(surface, model, 'onnx', c);
        return `| ${surface} | ${model} | ${c} | ${torch?.throughput ?? '-'} | ${onnx?.throughput ?? '-'} | ${ratio(surface, model, c).toFixed(2)}x | ${torch?.latency_ms.p50} / ${torch?.latency_ms.p99} | ${onnx?.latency_ms.p50} / ${onnx?.latency_ms.p99} |`;
      }),
    ),
  );
  const small = models[0] as string;
  const top = Math.max(...concurrencies);
  const best = Math.max(...surfaces.map((s) => ratio(s, small, top)));
  return [
    '## Engines: torch and onnx (bench/engines)',
    '',
    `\`node --import tsx bench/engines/run.ts\`: each demo model served twice, by the torch engine (TorchScript in a worker process) and by the onnx engine (the same weights exported with \`torch.onnx.export\`, ONNX Runtime in a thread of the gateway), both with the same batching (max 16 rows, 1 ms delay, adaptive) and one instance. \`http\`: OIP v2 binary requests from the benchmark process over keep-alive connections to a gateway process; \`in-process\`: the same requests handed to a gateway in the benchmark's own process, without the HTTP front that both engines pay alike. Closed loops, ${f.rounds} rounds of ${f.block_ms / 1000} s per engine, the engines alternating. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    '| surface | model | concurrency | torch req/s | onnx req/s | onnx / torch | torch p50 / p99 ms | onnx p50 / p99 ms |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    '| model | rows compared | max abs difference | same argmax | torch worker RSS MB | onnx sessions in the gateway MB |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...f.accuracy.map((a) => {
      const mem = f.memory_mb.find((x) => x.model === a.model);
      return `| ${a.model} | ${a.rows} | ${a.max_abs_diff.toExponential(2)} | ${a.argmax_agree}/${a.rows} | ${mem?.torch_worker ?? '-'} | ${mem?.onnx_in_gateway ?? '-'} |`;
    }),
    '',
    `Target: the best variant at least ${f.target_ratio}x the torch fp32 throughput on the small model at concurrency ${top}; this run: onnx fp32 ${surfaces.map((s) => `${ratio(s, small, top).toFixed(2)}x ${s}`).join(', ')} (${best >= f.target_ratio ? 'met' : 'missed'}). The int8, fp16 and compiled variants are not built yet.`,
    '',
  ].join('\n');
}
