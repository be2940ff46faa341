import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/remote/run.ts writes, and its docs/benchmarks.md section. */

export interface RemoteRow {
  model: string;
  input_bytes: number;
  requests: number;
  direct_ms: Distribution;
  via_tensorgate_ms: Distribution;
  /** p50 through tensorgate minus p50 direct. */
  added_p50_ms: number;
  /** The median of the per-pair differences (each request through tensorgate minus the direct one before it). */
  paired_added_p50_ms: number;
  /** The remote engine's call to KServe as tensorgate timed it (its compute stage): encode, round trip, decode. */
  engine_call_ms: Distribution;
  /** engine_call p50 minus direct p50: the engine's own share of what tensorgate adds. */
  engine_added_p50_ms: number;
}

export interface RemoteFile {
  benchmark: 'remote';
  date: string;
  machine: MachineInfo;
  target_ms: number;
  rows: RemoteRow[];
}

export function renderRemote(files: unknown[]): string {
  const f = files.at(-1) as RemoteFile;
  const m = f.machine;
  const worst = Math.max(...f.rows.map((r) => r.added_p50_ms));
  return [
    '## Remote engine overhead (bench/remote)',
    '',
    `\`node --import tsx bench/remote/run.ts\`: the KServe model server serves each demo model; the same OIP v2 binary request goes to it directly and through tensorgate (a model of the same name with \`engine: "remote"\` pointing at it, batching off), alternating request by request at concurrency 1 over keep-alive connections. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    "| model | input bytes | requests | KServe directly p50 / p99 ms | through tensorgate p50 / p99 ms | added p50 ms | added, paired median ms | the engine's call p50 ms | of which the engine, p50 ms |",
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...f.rows.map(
      (r) =>
        `| ${r.model} | ${r.input_bytes} | ${r.requests} | ${r.direct_ms.p50} / ${r.direct_ms.p99} | ${r.via_tensorgate_ms.p50} / ${r.via_tensorgate_ms.p99} | ${r.added_p50_ms} | ${r.paired_added_p50_ms} | ${r.engine_call_ms.p50} | ${r.engine_added_p50_ms} |`,
    ),
    '',
    `Target: at most ${f.target_ms} ms added at p50 with binary tensors; this run: at most ${worst} ms end to end (${worst <= f.target_ms ? 'met' : 'missed'}), of which the remote engine's call itself (encoding the request, the second round trip over loopback, decoding the answer, as tensorgate times it) at most ${Math.max(...f.rows.map((r) => r.engine_added_p50_ms))} ms. The rest is tensorgate's OIP v2 HTTP front (taking in the request body, writing the answer), which a local model pays alike.`,
    '',
  ].join('\n');
}
