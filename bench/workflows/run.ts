/**
 * bench/workflows: a workflow run server-side (one run_workflow call) against the same stages
 * called one by one by an MCP client, in the same run, on the same server.
 *
 *   node --import tsx bench/workflows/run.ts [--runs 200] [--warmup 20] [--out FILE]
 *
 * The client chain is the strongest one a client can build: it passes tensor:// handles between
 * calls, so no tensor travels; what it pays is one MCP round trip per stage, and the agent's
 * turn between calls that this benchmark does not even count. Scenarios:
 *
 *   - vision, object: the demo pipeline on a PNG with an object (preprocess, which decodes the
 *     file in its worker -> detect -> classify -> fuse, four stages); the client reads the
 *     detector's max score to decide.
 *   - vision, none: the same on an empty image (two stages; the branch is not taken).
 *   - adder x8: eight tiny stages in a row, where the per-stage cost is all there is.
 *
 * Per run, the workflow's own overhead per stage is (total_ms - the sum of the stages' spans) /
 * stages: everything the workflow adds to the model calls themselves (decoding its inputs once,
 * scheduling, handing tensors on, presenting outputs). Workflow and chain alternate run by run, so
 * drift on a shared host hits both alike. Results go to bench/results/workflows-<time>.json.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { encodePng } from '../../src/tensor/png.js';
import { buildDemoModels } from '../batching/models.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, median, round } from '../mcp-overhead/stats.js';
import { startTensorgate, stopProcess, waitHealthy } from '../peers/harness.js';
import type { WorkflowScenario, WorkflowsFile } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PYTHON = pythonExecutable();

const { values: opts } = parseArgs({
  options: {
    runs: { type: 'string', default: '200' },
    warmup: { type: 'string', default: '20' },
    out: { type: 'string' },
  },
});

interface Output {
  name: string;
  uri?: string;
  summary?: { stats?: { max: number | null }; values?: unknown };
}
interface InferOut {
  outputs: Output[];
}
interface RunOut {
  outputs: Output[];
  stages: { status: string; started_ms?: number; ended_ms?: number }[];
  timings: { total_ms: number; run_ms: number };
}

const CHAIN_LENGTH = 8;

/** The demo models (the vision pipeline included), an adder and an eight-stage adder chain, in one folder. */
function repository(work: string): string {
  const demo = join(ROOT, 'models');
  buildDemoModels(ROOT, PYTHON, demo);
  if (!existsSync(join(demo, 'vision-pipeline')))
    execFileSync(PYTHON, [join(ROOT, 'scripts/make_demo_models.py'), demo, '--only', 'pipeline'], { stdio: 'ignore' });
  const fixtures = join(work, 'fixtures');
  execFileSync(PYTHON, [join(ROOT, 'scripts/make_test_models.py'), fixtures], { stdio: 'ignore' });
  const repo = join(work, 'models');
  mkdirSync(repo);
  for (const m of ['image-preprocess', 'object-detector', 'image-classifier', 'detection-fusion', 'vision-pipeline'])
    symlinkSync(join(demo, m), join(repo, m));
  symlinkSync(join(fixtures, 'adder'), join(repo, 'adder'));
  const steps = Array.from({ length: CHAIN_LENGTH }, (_, i) => ({
    stage: `s${i + 1}`,
    model: 'adder',
    inputs: { a: i === 0 ? 'x' : `s${i}.sum`, b: 'x' },
  }));
  mkdirSync(join(repo, 'adder-chain'));
  writeFileSync(
    join(repo, 'adder-chain', 'workflow.json'),
    JSON.stringify({
      name: 'adder-chain',
      description: `x * ${CHAIN_LENGTH + 1} by ${CHAIN_LENGTH} adder stages in a row`,
      inputs: [{ name: 'x', dtype: 'float32', shape: [-1, -1] }],
      steps,
      outputs: { y: `s${CHAIN_LENGTH}.sum` },
    }),
  );
  return repo;
}

/** A 224x224 PNG as a data: URI (what an agent holding a screenshot passes): dark, with a bright square when `object`. */
function image(object: boolean): string {
  const data = Buffer.alloc(224 * 224 * 3, 20);
  if (object) for (let y = 64; y < 128; y++) data.fill(240, (y * 224 + 96) * 3, (y * 224 + 160) * 3);
  return `data:image/png;base64,${encodePng(data, 224, 224, 3).toString('base64')}`;
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'tg-bench-workflows-'));
  const repo = repository(work);
  const { child, base } = await startTensorgate(ROOT, repo, work);
  const client = new Client({ name: 'bench-workflows', version: '0' });
  try {
    for (const m of ['image-preprocess', 'object-detector', 'image-classifier', 'detection-fusion', 'adder'])
      await waitHealthy(base, `/v2/models/${m}/ready`);
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    const call = async <T>(name: string, args: Record<string, unknown>): Promise<T> => {
      const result = await client.callTool({ name, arguments: args });
      if (result.isError) throw new Error(`${name}: ${JSON.stringify(result.content)}`);
      return result.structuredContent as T;
    };
    const infer = (model: string, inputs: Record<string, unknown>) => call<InferOut>('infer', { model, inputs });
    const uri = (r: InferOut, name: string) => r.outputs.find((o) => o.name === name)?.uri as string;

    const visionChain = (object: boolean) => async () => {
      const prep = await infer('image-preprocess', { image: image(object) });
      const detect = await infer('object-detector', { image: uri(prep, 'image') });
      const scores = detect.outputs.find((o) => o.name === 'scores')?.summary?.stats?.max ?? 0;
      if (scores <= 0.5) return 2;
      const classify = await infer('image-classifier', { image: uri(prep, 'image') });
      await infer('detection-fusion', { scores: uri(detect, 'scores'), logits: uri(classify, 'logits') });
      return 4;
    };
    const adderChain = async () => {
      const x = [[1, 2, 3, 4]];
      let sum = await infer('adder', { a: x, b: x });
      for (let i = 1; i < CHAIN_LENGTH; i++) sum = await infer('adder', { a: uri(sum, 'sum'), b: x });
      return CHAIN_LENGTH;
    };
    const scenarios: {
      name: string;
      workflow: string;
      inputs: () => Record<string, unknown>;
      chain: () => Promise<number>;
    }[] = [
      {
        name: 'vision, object',
        workflow: 'vision-pipeline',
        inputs: () => ({ image: image(true) }),
        chain: visionChain(true),
      },
      {
        name: 'vision, none',
        workflow: 'vision-pipeline',
        inputs: () => ({ image: image(false) }),
        chain: visionChain(false),
      },
      {
        name: `adder x${CHAIN_LENGTH}`,
        workflow: 'adder-chain',
        inputs: () => ({ x: [[1, 2, 3, 4]] }),
        chain: adderChain,
      },
    ];

    const runs = Number(opts.runs);
    const warmup = Number(opts.warmup);
    const results: WorkflowScenario[] = [];
    for (const s of scenarios) {
      const flow: number[] = [];
      const chain: number[] = [];
      const overhead: number[] = [];
      const gaps: number[] = [];
      let stages = 0;
      for (let i = 0; i < warmup + runs; i++) {
        let t = performance.now();
        const run = await call<RunOut>('run_workflow', { workflow: s.workflow, inputs: s.inputs() });
        const flowMs = performance.now() - t;
        t = performance.now();
        stages = await s.chain();
        const chainMs = performance.now() - t;
        if (i < warmup) continue;
        flow.push(flowMs);
        chain.push(chainMs);
        const ran = run.stages.filter((st) => st.status === 'ok');
        const spans = ran.reduce((sum, st) => sum + ((st.ended_ms ?? 0) - (st.started_ms ?? 0)), 0);
        overhead.push((run.timings.total_ms - spans) / ran.length);
        gaps.push((run.timings.run_ms - spans) / ran.length);
      }
      const row: WorkflowScenario = {
        name: s.name,
        stages,
        workflow_ms: distribution(flow),
        chain_ms: distribution(chain),
        speedup: round(median(chain) / median(flow), 2),
        overhead_per_stage_ms: distribution(overhead),
        scheduling_per_stage_ms: distribution(gaps),
      };
      results.push(row);
      process.stdout.write(
        `${s.name} (${stages} stages): workflow p50 ${row.workflow_ms.p50} ms p99 ${row.workflow_ms.p99}; client chain p50 ${row.chain_ms.p50} ms p99 ${row.chain_ms.p99}; ${row.speedup}x; overhead per stage p50 ${row.overhead_per_stage_ms.p50} ms (scheduling ${row.scheduling_per_stage_ms.p50} ms)\n`,
      );
    }
    const file: WorkflowsFile = {
      benchmark: 'workflows',
      date: new Date().toISOString(),
      machine: machineInfo(ROOT),
      config: { runs, warmup, transport: 'MCP Streamable HTTP' },
      scenarios: results,
    };
    const out =
      opts.out ?? join(ROOT, 'bench', 'results', `workflows-${file.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
    writeFileSync(out, `${JSON.stringify(file, null, 2)}\n`);
    process.stdout.write(`wrote ${out}\n`);
  } finally {
    await client.close().catch(() => {});
    await stopProcess(child);
    rmSync(work, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
