/**
 * bench/engines: the same model on the torch engine and on the onnx engine, in one gateway, in
 * the same run. Each demo model's version 1 is served as MODEL-torch (TorchScript in a worker
 * process) and MODEL-onnx (exported with torch.onnx.export by export_onnx.py, ONNX Runtime in a
 * thread of the gateway), with the same batching and one instance each.
 *
 *   node --import tsx bench/engines/run.ts [--ms 4000] [--rounds 3] [--out FILE]
 *
 * Per model and concurrency (1 and 16), closed loops of OIP v2 binary requests, the engines
 * alternating round by round so drift hits both alike; then the same in-process (requests handed
 * to a Gateway in this process), which leaves out the HTTP front that both engines pay alike. Also: the largest difference between the
 * two engines' outputs on the same inputs, and memory (the torch worker's RSS from /metrics; what
 * loading the onnx sessions added to the gateway's RSS). Target: at least 1.5x the torch fp32
 * throughput on the small model at concurrency 16. Results go to bench/results/engines-<time>.json.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { defaultConfig } from '../../src/config.js';
import { Gateway } from '../../src/gateway.js';
import { tensorSource } from '../../src/tensor/source.js';
import type { Tensor } from '../../src/tensor/tensor.js';
import { buildDemoModels } from '../batching/models.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { round } from '../mcp-overhead/stats.js';
import { binaryRequest, type Prepared } from '../oip/requests.js';
import {
  type Call,
  closedLoop,
  httpCall,
  type Measured,
  startTensorgate,
  stopProcess,
  waitHealthy,
} from '../peers/harness.js';
import type { Accuracy, EngineBlock, EngineName, EnginesFile } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PYTHON = process.env.TENSORGATE_PYTHON ?? '/usr/bin/python3';
const TARGET_RATIO = 1.5;
const CONCURRENCIES = [1, 16];
const ENGINES: EngineName[] = ['torch', 'onnx'];
const BATCHING = { max_batch_size: 16, max_queue_delay_us: 1000 };

const { values: opts } = parseArgs({
  options: {
    ms: { type: 'string', default: '4000' },
    rounds: { type: 'string', default: '3' },
    out: { type: 'string' },
  },
});

const MODELS = [
  { source: 'tabular-classifier', input: 'features', output: 'probabilities', item: [4], classes: 3 },
  { source: 'image-classifier', input: 'image', output: 'logits', item: [3, 224, 224], classes: 10 },
];

/** Reproducible inputs in [-1, 1). */
function inputs(elements: number, seed: number): Float32Array {
  const out = new Float32Array(elements);
  let s = seed;
  for (let i = 0; i < elements; i++) {
    s = (s * 1103515245 + 12345) % 2147483648;
    out[i] = s / 1073741824 - 1;
  }
  return out;
}

/** MODEL-torch: version 1 of the demo model with the benchmark's batching. */
function torchCopy(source: string, repo: string, name: string): void {
  const dir = join(repo, name);
  cpSync(join(source, '1'), join(dir, '1'), { recursive: true });
  const config = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8')) as Record<string, unknown>;
  const versions = config.versions as Record<string, unknown>;
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({ ...config, name, versions: { '1': versions['1'] }, default_version: '1', batching: BATCHING }),
  );
}

function onnxExport(source: string, out: string, name: string): void {
  execFileSync(PYTHON, [join(ROOT, 'bench/engines/export_onnx.py'), source, out, name], { stdio: 'ignore' });
  const file = join(out, name, 'config.json');
  const config = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  writeFileSync(file, JSON.stringify({ ...config, batching: BATCHING }));
}

function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024, 1);
}

async function workerRssMb(base: string, model: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text
    .split('\n')
    .find((l) => l.startsWith('tensorgate_worker_resident_memory_bytes') && l.includes(`model="${model}"`));
  return round(Number(line?.split(' ').at(-1) ?? 0) / 1024 / 1024, 1);
}

/** One binary request's output, as floats. */
async function outputOf(
  base: string,
  model: string,
  input: string,
  output: string,
  shape: number[],
  data: Float32Array,
) {
  const prepared = binaryRequest({ input, output, shape, outputBytes: 0 }, data);
  const res = await fetch(`${base}/v2/models/${model}/infer`, {
    method: 'POST',
    headers: Object.fromEntries(Object.entries(prepared.headers).map(([k, v]) => [k, String(v)])),
    body: new Uint8Array(prepared.body),
  });
  if (res.status !== 200) throw new Error(`${model}: HTTP ${res.status} ${await res.text()}`);
  const body = Buffer.from(await res.arrayBuffer());
  const header = Number(res.headers.get('inference-header-content-length'));
  return new Float32Array(new Uint8Array(body.subarray(header)).buffer);
}

async function main(): Promise<void> {
  const blockMs = Number(opts.ms);
  const rounds = Number(opts.rounds);
  const work = mkdtempSync(join(tmpdir(), 'tg-bench-engines-'));
  const demo = join(ROOT, 'models');
  buildDemoModels(ROOT, PYTHON, demo);
  const repo = join(work, 'models');
  const staged = join(work, 'onnx');
  mkdirSync(repo);
  for (const m of MODELS) {
    torchCopy(join(demo, m.source), repo, `${m.source}-torch`);
    onnxExport(join(demo, m.source), staged, `${m.source}-onnx`);
  }
  const { child, base } = await startTensorgate(ROOT, repo, work);
  try {
    for (const m of MODELS) await waitHealthy(base, `/v2/models/${m.source}-torch/ready`);
    // The onnx models load after the gateway has settled, so their memory shows as a difference.
    await new Promise((r) => setTimeout(r, 1000));
    const before = rssMb(child.pid as number);
    const memory: EnginesFile['memory_mb'] = [];
    for (const m of MODELS) {
      cpSync(join(staged, `${m.source}-onnx`), join(repo, `${m.source}-onnx`), { recursive: true });
      const gatewayBefore = rssMb(child.pid as number);
      const res = await fetch(`${base}/v2/repository/models/${m.source}-onnx/load`, { method: 'POST' });
      if (res.status !== 200) throw new Error(`loading ${m.source}-onnx: ${await res.text()}`);
      memory.push({
        model: m.source,
        torch_worker: await workerRssMb(base, `${m.source}-torch`),
        onnx_in_gateway: round(rssMb(child.pid as number) - gatewayBefore, 1),
      });
    }
    process.stderr.write(`gateway RSS ${before} MB before the onnx sessions\n`);

    const accuracy: Accuracy[] = [];
    for (const m of MODELS) {
      const rows = m.item.length === 1 ? 64 : 4;
      const data = inputs(rows * m.item.reduce((a, b) => a * b, 1), 11);
      const shape = [rows, ...m.item];
      const [t, o] = await Promise.all(
        ENGINES.map((e) => outputOf(base, `${m.source}-${e}`, m.input, m.output, shape, data)),
      );
      let maxAbs = 0;
      let agree = 0;
      for (let r = 0; r < rows; r++) {
        let bestT = 0;
        let bestO = 0;
        for (let c = 0; c < m.classes; c++) {
          const i = r * m.classes + c;
          maxAbs = Math.max(maxAbs, Math.abs((t?.[i] ?? 0) - (o?.[i] ?? 0)));
          if ((t?.[i] ?? 0) > (t?.[r * m.classes + bestT] ?? 0)) bestT = c;
          if ((o?.[i] ?? 0) > (o?.[r * m.classes + bestO] ?? 0)) bestO = c;
        }
        if (bestT === bestO) agree++;
      }
      accuracy.push({ model: m.source, rows, max_abs_diff: maxAbs, argmax_agree: agree });
    }

    const blocks = await measureAll('http', (model, engine, request) => {
      const path = `/v2/models/${model}-${engine}/infer`;
      return async () => httpCall(base, path, request.prepared);
    });
    await stopProcess(child);
    // The same engines without the HTTP front: requests handed to the gateway in this process.
    const gateway = await Gateway.open({ ...defaultConfig(work), registry: join(work, 'r2.db'), modelsDir: repo });
    try {
      await gateway.loadAll();
      blocks.push(
        ...(await measureAll('in-process', (model, engine, request) => {
          const inputs = new Map([[request.input, tensorSource(request.tensor)]]);
          return async () => async () => {
            await gateway.inferTensors({ model: `${model}-${engine}`, inputs, form: 'binary' });
          };
        })),
      );
    } finally {
      await gateway.close();
    }
    const file: EnginesFile = {
      benchmark: 'engines',
      date: new Date().toISOString(),
      machine: machineInfo(ROOT, { python: PYTHON }),
      block_ms: blockMs,
      rounds,
      blocks,
      accuracy,
      memory_mb: memory,
      target_ratio: TARGET_RATIO,
    };
    const out =
      opts.out ?? join(ROOT, 'bench', 'results', `engines-${file.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify(file, null, 2)}\n`);
    for (const b of blocks)
      process.stdout.write(
        `${b.model} ${b.engine} c=${b.concurrency}: ${b.throughput} req/s, p50 ${b.latency_ms.p50} ms, p99 ${b.latency_ms.p99} ms\n`,
      );
    for (const a of accuracy)
      process.stdout.write(
        `${a.model}: max |torch - onnx| ${a.max_abs_diff}, argmax agrees ${a.argmax_agree}/${a.rows}\n`,
      );
    process.stdout.write(`wrote ${out}\n`);
  } finally {
    await stopProcess(child);
    rmSync(work, { recursive: true, force: true });
  }

  /** Both engines on every model at every concurrency, the engines alternating round by round. */
  async function measureAll(
    surface: EngineBlock['surface'],
    makeCall: (model: string, engine: EngineName, request: Request) => (client: number) => Promise<Call>,
  ): Promise<EngineBlock[]> {
    const blocks: EngineBlock[] = [];
    for (const m of MODELS) {
      const shape = [1, ...m.item];
      const data = inputs(
        m.item.reduce((a, b) => a * b, 1),
        5,
      );
      const request: Request = {
        input: m.input,
        tensor: { dtype: 'float32', shape, data: new Uint8Array(data.buffer) },
        prepared: binaryRequest({ input: m.input, output: m.output, shape, outputBytes: m.classes * 4 }, data),
      };
      for (const concurrency of CONCURRENCIES) {
        const measured = new Map<EngineName, Measured[]>(ENGINES.map((e) => [e, []]));
        for (let r = 0; r < rounds; r++) {
          const order = r % 2 === 0 ? ENGINES : [...ENGINES].reverse();
          for (const engine of order) {
            const result = await closedLoop(makeCall(m.source, engine, request), concurrency, blockMs, 500);
            measured.get(engine)?.push(result);
            process.stderr.write(
              `${surface} ${m.source} ${engine} c=${concurrency} round ${r + 1}: ${result.throughput} req/s, p50 ${result.latency.p50} ms\n`,
            );
          }
        }
        for (const engine of ENGINES) {
          const runs = measured.get(engine) ?? [];
          // The round with the median p50 stands for the latencies; throughput is the mean of the rounds.
          const byP50 = [...runs].sort((a, b) => a.latency.p50 - b.latency.p50);
          blocks.push({
            surface,
            model: m.source,
            engine,
            concurrency,
            throughput: round(runs.reduce((a, b) => a + b.throughput, 0) / runs.length, 1),
            latency_ms: (byP50[byP50.length >> 1] as Measured).latency,
          });
        }
      }
    }
    return blocks;
  }
}

interface Request {
  input: string;
  tensor: Tensor;
  prepared: Prepared;
}

await main();
