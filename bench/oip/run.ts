/**
 * bench/oip: what an OIP v2 call costs over the raw forward, per way of moving the tensor.
 *
 *   node --import tsx bench/oip/run.ts [--concurrency 1,16] [--seconds 3] [--rounds 2] [--out FILE]
 *
 * The real server (`tensorgate serve --http`) serves version 1 of the demo models (models/, built
 * by scripts/setup.sh), plus a copy of the small model with dynamic batching on (max 64 rows,
 * 0.5 ms), as `tabular_batched`. Closed-loop clients in this process (node:http, keep-alive, one socket per
 * client) send the same input, one row, to the small tabular model and to the image model (v1,
 * TorchScript) as v2 JSON, as v2 binary tensor data (binary outputs too), and through system
 * shared memory (input region written once; one output region per client), for a fixed time per
 * block after a warm-up; forms interleaved in rounds. The baseline is the raw TorchScript forward
 * in one Python process (bench/mcp-overhead/baseline.py) on the same input, measured in the same
 * run. The client's own CPU use is reported per block, to show it is not the bottleneck.
 * When bench/peers/setup-peers.sh has installed it, the KServe model server (bench/oip/kserve_server.py,
 * the same TorchScript file, same torch, same threads) is measured the same way with v2 JSON and
 * v2 binary inputs, one model at a time, while tensorgate is stopped.
 * Results go to bench/results/oip-<time>.json; `node --import tsx bench/report.ts` renders them.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Progress } from '../../src/cli/progress.js';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { encodeNpy } from '../../src/tensor/npy.js';
import { makeVariant } from '../batching/models.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { type Distribution, distribution, median, round } from '../mcp-overhead/stats.js';
import { startProcess, stopProcess } from '../peers/harness.js';
import { binaryRequest, jsonRequest, type Prepared, post, sharedMemoryRequests } from './requests.js';
import type { BlockResult, Form, ModelKey, OipResult } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PYTHON = pythonExecutable();
const FORMS: Form[] = ['json', 'binary', 'shm'];
const KSERVE_PYTHON = join(ROOT, '.tensorgate', 'peers', 'bin', 'python');

const { values: opts } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,16' },
    seconds: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '2' },
    warmup: { type: 'string', default: '0.5' },
    out: { type: 'string' },
  },
});

interface ModelCase {
  key: ModelKey;
  model: string;
  version: string;
  input: string;
  output: string;
  shape: number[];
  outputBytes: number;
}

const TABULAR = {
  version: '1',
  input: 'features',
  output: 'probabilities',
  shape: [1, 4],
  outputBytes: 12,
};
/** Dynamic batching for the small model's batched case (bench/batching's best setting). */
const BATCHING = { max_batch_size: 64, max_queue_delay_us: 500 };

const MODELS: ModelCase[] = [
  { key: 'tabular', model: 'tabular-classifier', ...TABULAR },
  { key: 'tabular_batched', model: '', ...TABULAR },
  {
    key: 'image',
    model: 'image-classifier',
    version: '1',
    input: 'image',
    output: 'logits',
    shape: [1, 3, 224, 224],
    outputBytes: 40,
  },
];

const work = mkdtempSync(join(tmpdir(), 'tg-bench-oip-'));
/** Unlinks the shared-memory regions registered so far. */
const cleanups: (() => void)[] = [];

/**
 * A repository of the demo models' version 1 plus a copy of the small model with dynamic
 * batching on; the batched case's model name is filled in.
 */
function modelRepository(): string {
  const demo = join(ROOT, 'models');
  if (!existsSync(join(demo, 'image-classifier', 'config.json')))
    execFileSync(PYTHON, [join(ROOT, 'scripts/make_demo_models.py'), demo], { stdio: 'inherit' });
  const repo = join(work, 'models');
  makeVariant('tabular', demo, repo, null);
  makeVariant('image', demo, repo, null);
  const batched = makeVariant('tabular', demo, repo, BATCHING);
  (MODELS.find((m) => m.key === 'tabular_batched') as ModelCase).model = batched.registered_as;
  return repo;
}

async function startServer(): Promise<{ base: string; stop: () => Promise<void> }> {
  // startProcess reads the server's output only until it is ready: the request log it writes
  // afterwards must not cost this load generator anything.
  const { child, match } = await startProcess(
    process.execPath,
    [join(ROOT, 'bin/tensorgate.js'), '--models', modelRepository(), '--registry', join(work, 'r.db')].concat([
      '--runs-dir',
      join(work, 'runs'),
      '--audit-log',
      join(work, 'audit.jsonl'),
      'serve',
      '--http',
      '0',
    ]),
    ROOT,
    /ready: .* at (http:\/\/[\d.]+:\d+)\/mcp/,
  );
  return { base: match[1] as string, stop: () => stopProcess(child) };
}

/** The KServe model server with one model, on a free port; resolves once it answers ready. */
async function startKserve(m: ModelCase): Promise<{ base: string; stop: () => Promise<void> }> {
  const port = 18_000 + Math.floor(Math.random() * 2000);
  const child = spawn(
    KSERVE_PYTHON,
    [join(ROOT, 'bench/oip/kserve_server.py'), '--model-dir', join(ROOT, 'models', m.model), '--port', String(port)],
    { stdio: 'ignore' },
  );
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300; i++) {
    const ready = await fetch(`${base}/v2/models/${m.model}/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    base,
    stop: async () => {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    },
  };
}

/** The request bodies of every form for one model; shared-memory regions registered. */
async function prepare(base: string, m: ModelCase, input: Float32Array, concurrency: number) {
  const shm = await sharedMemoryRequests(base, m.key, m, input, concurrency);
  cleanups.push(shm.cleanup);
  return { ...plainBodies(m, input), shm: shm.requests } satisfies Record<Form, Prepared[]>;
}

function plainBodies(m: ModelCase, input: Float32Array): Record<'json' | 'binary', Prepared[]> {
  return { json: [jsonRequest(m, input)], binary: [binaryRequest(m, input)] };
}

/** Closed-loop clients for `seconds` after a warm-up; latencies of the calls answered in the window. */
async function block(base: string, path: string, bodies: Prepared[], concurrency: number, seconds: number) {
  const warmupEnd = performance.now() + Number(opts.warmup) * 1000;
  const end = warmupEnd + seconds * 1000;
  const latencies: number[] = [];
  let errors = 0;
  let cpuStart: NodeJS.CpuUsage | undefined;
  const client = async (i: number) => {
    const prepared = bodies[i % bodies.length] as Prepared;
    for (;;) {
      const start = performance.now();
      if (start >= end) return;
      if (start >= warmupEnd && !cpuStart) cpuStart = process.cpuUsage();
      try {
        await post(base, path, prepared);
        if (start >= warmupEnd && performance.now() <= end) latencies.push(performance.now() - start);
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, i) => client(i)));
  const cpu = process.cpuUsage(cpuStart);
  return {
    latency: distribution(latencies),
    throughput: round(latencies.length / seconds, 1),
    errors,
    client_cpu_percent: round(((cpu.user + cpu.system) / 1e6 / seconds) * 100, 1),
  };
}

function rawForward(m: ModelCase, input: Float32Array): Distribution {
  if (m.key === 'tabular_batched') return rawForward(MODELS[0] as ModelCase, input);
  const path = join(work, `${m.key}.npy`);
  writeFileSync(path, encodeNpy({ dtype: 'float32', shape: m.shape, data: new Uint8Array(input.buffer) }));
  const out = execFileSync(
    PYTHON,
    [
      join(ROOT, 'bench/mcp-overhead/baseline.py'),
      '--model-dir',
      join(ROOT, 'models', m.model),
      '--input',
      path,
    ].concat(['--version', m.version, '--iterations', '200']),
    { encoding: 'utf8' },
  );
  return distribution((JSON.parse(out) as { ms: number[] }).ms);
}

type Measured = Awaited<ReturnType<typeof block>>;

/** Rounds of every form at one concurrency; per form the round with the median p50. */
async function measure(
  forms: Form[],
  rounds: number,
  run: (form: Form) => Promise<Measured>,
  label: string,
): Promise<Map<Form, { chosen: Measured; rounds_p50: number[] }>> {
  const runs = new Map<Form, Measured[]>();
  // On a terminal's stderr only, redrawn once a second at most: the client's CPU is measured too.
  const progress = new Progress({ label, total: rounds * forms.length, intervalMs: 1000 });
  for (let round_ = 0; round_ < rounds; round_++) {
    for (const form of forms) {
      progress.update({ detail: `round ${round_ + 1}/${rounds}: ${form}` });
      const result = await run(form);
      runs.set(form, [...(runs.get(form) ?? []), result]);
      progress.interrupt(() =>
        process.stderr.write(
          `${label} ${form}: p50 ${result.latency.p50} ms, ${result.throughput}/s, client CPU ${result.client_cpu_percent}%\n`,
        ),
      );
      progress.tick();
    }
  }
  progress.stop();
  const out = new Map<Form, { chosen: Measured; rounds_p50: number[] }>();
  for (const [form, all] of runs) {
    const chosen = [...all].sort((a, b) => a.latency.p50 - b.latency.p50)[Math.floor(all.length / 2)] as Measured;
    out.set(form, { chosen, rounds_p50: all.map((r) => r.latency.p50) });
  }
  return out;
}

async function main(): Promise<void> {
  const concurrencies = String(opts.concurrency).split(',').map(Number);
  const seconds = Number(opts.seconds);
  const rounds = Number(opts.rounds);
  const blocks: BlockResult[] = [];
  const raw: OipResult['raw_forward'] = {};
  const inputs = new Map(
    MODELS.map((m) => [m.key, new Float32Array(m.shape.reduce((a, b) => a * b, 1)).map((_, i) => Math.sin(i))]),
  );
  const record = (
    server: BlockResult['server'],
    m: ModelCase,
    concurrency: number,
    measured: Awaited<ReturnType<typeof measure>>,
  ) => {
    for (const [form, { chosen, rounds_p50 }] of measured)
      blocks.push({
        server,
        model: m.key,
        concurrency,
        form,
        ...chosen,
        p50_overhead_ms: round(chosen.latency.p50 - (raw[m.key]?.p50 ?? Number.NaN)),
        rounds_p50,
      });
  };

  const server = await startServer();
  try {
    for (const m of MODELS) {
      const input = inputs.get(m.key) as Float32Array;
      raw[m.key] = rawForward(m, input);
      process.stderr.write(`${m.key}: raw forward p50 ${raw[m.key]?.p50} ms\n`);
      const bodies = await prepare(server.base, m, input, Math.max(...concurrencies));
      const path = `/v2/models/${m.model}/versions/${m.version}/infer`;
      for (const concurrency of concurrencies) {
        const measured = await measure(
          FORMS,
          rounds,
          (form) => block(server.base, path, bodies[form], concurrency, seconds),
          `tensorgate ${m.key} c=${concurrency}`,
        );
        record('tensorgate', m, concurrency, measured);
      }
    }
  } finally {
    await server.stop();
    for (const cleanup of cleanups) cleanup();
  }

  const kserve = existsSync(KSERVE_PYTHON);
  if (!kserve) process.stderr.write('KServe not installed (bash bench/peers/setup-peers.sh): skipped\n');
  // KServe has no dynamic batching of its own outside Kubernetes: the plain models only.
  for (const m of kserve ? MODELS.filter((c) => c.key !== 'tabular_batched') : []) {
    const peer = await startKserve(m);
    try {
      const bodies = plainBodies(m, inputs.get(m.key) as Float32Array);
      for (const concurrency of concurrencies) {
        const measured = await measure(
          ['json', 'binary'],
          rounds,
          (form) =>
            block(peer.base, `/v2/models/${m.model}/infer`, bodies[form as 'json' | 'binary'], concurrency, seconds),
          `kserve ${m.key} c=${concurrency}`,
        );
        record('kserve', m, concurrency, measured);
      }
    } finally {
      await peer.stop();
    }
  }
  const result: OipResult = {
    benchmark: 'oip',
    date: new Date().toISOString(),
    profiled: false,
    machine: machineInfo(ROOT),
    config: { seconds, rounds, warmup_s: Number(opts.warmup), concurrency: concurrencies },
    raw_forward: raw,
    blocks,
  };
  const out = opts.out ?? join(ROOT, 'bench', 'results', `oip-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  for (const b of blocks)
    process.stdout.write(
      `${(b.server ?? '').padEnd(10)} ${b.model.padEnd(15)} c=${String(b.concurrency).padEnd(3)} ${b.form.padEnd(7)} p50 ${b.latency.p50} ms (+${b.p50_overhead_ms} over raw)  p99 ${b.latency.p99} ms  ${b.throughput}/s\n`,
    );
  process.stderr.write(`raw forward p50: ${MODELS.map((m) => `${m.key} ${raw[m.key]?.p50} ms`).join(', ')}\n`);
  process.stderr.write(`wrote ${out}; median of ${median(blocks.map((b) => b.client_cpu_percent))}% client CPU\n`);
}

main().catch((err: unknown) => {
  for (const cleanup of cleanups) cleanup();
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
