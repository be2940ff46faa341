import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { Distribution } from '../mcp-overhead/stats.js';

/** What bench/workflows/run.ts writes, and its docs/benchmarks.md section. */

export interface WorkflowScenario {
  name: string;
  stages: number;
  workflow_ms: Distribution;
  chain_ms: Distribution;
  /** Chain p50 over workflow p50. */
  speedup: number;
  /** (total - sum of stage spans) / stages: all the workflow adds to the model calls. */
  overhead_per_stage_ms: Distribution;
  /** (run - sum of stage spans) / stages: the scheduler's share of it. */
  scheduling_per_stage_ms: Distribution;
}

export interface WorkflowsFile {
  benchmark: 'workflows';
  date: string;
  machine: MachineInfo;
  config: { runs: number; warmup: number; transport: string };
  scenarios: WorkflowScenario[];
}

const TARGET_OVERHEAD_MS = 0.3;

export function renderWorkflows(files: unknown[]): string {
  const f = files.at(-1) as WorkflowsFile;
  const m = f.machine;
  const rows = f.scenarios.map(
    (s) =>
      `| ${s.name} | ${s.stages} | ${s.workflow_ms.p50} / ${s.workflow_ms.p99} | ${s.chain_ms.p50} / ${s.chain_ms.p99} | ${s.speedup}x | ${s.overhead_per_stage_ms.p50} / ${s.overhead_per_stage_ms.p99} | ${s.scheduling_per_stage_ms.p50} |`,
  );
  const worst = Math.max(...f.scenarios.map((s) => s.overhead_per_stage_ms.p50));
  const slowest = Math.min(...f.scenarios.map((s) => s.speedup));
  return [
    '## Workflows against the client-side chain (bench/workflows)',
    '',
    `\`node --import tsx bench/workflows/run.ts\`: each scenario ${f.config.runs} times (after ${f.config.warmup} warm-up runs) as one \`run_workflow\` call and as the same stages called one by one with \`infer\`, alternating, from one MCP client over ${f.config.transport} at concurrency 1. The chain passes \`tensor://\` handles between calls, so no tensor travels: it pays one MCP round trip per stage (and, for an agent, a model turn per stage that is not counted here). ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    '| scenario | stages | workflow p50 / p99 ms | client chain p50 / p99 ms | chain / workflow (p50) | workflow overhead per stage p50 / p99 ms | of which scheduling, p50 ms |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    `Overhead per stage is (the workflow's total - the sum of its stages' spans) / stages: decoding the inputs once, scheduling, handing tensors on and presenting the outputs, everything but the model calls themselves. Target: at most ${TARGET_OVERHEAD_MS} ms per stage and faster than the chain end to end; this run: at most ${worst} ms per stage at p50 (${worst <= TARGET_OVERHEAD_MS ? 'met' : 'missed'}), the chain ${slowest}x the workflow's latency or more (${slowest > 1 ? 'faster' : 'not faster'} end to end).`,
    '',
  ].join('\n');
}
