/**
 * bench/engines: the variants of one model side by side, in one gateway, in the same run. Each
 * demo model's eager version (its nn.Module code and weights, version 2) is registered with
 * `tensorgate register --export onnx` (its ONNX export becomes the onnx variant) and offers fp32,
 * bf16 and int8; copies serve the same weights other ways. The variants measured, picked per
 * request as a client would pick them:
 *
 *   torch-fp32          MODEL, {"engine": "torch"}     eager PyTorch in a worker process (the baseline)
 *   torch-fp32-export   MODEL-export                   the torch.export program (version 1, .pt2)
 *   torch-fp32-compile  MODEL-compile                  torch.compile (Inductor, frozen weights)
 *   torch-fp32-aoti     MODEL-aoti                     an AOTInductor package compiled at load (cached)
 *   torch-bf16          MODEL, {"precision": "bf16"}   autocast
 *   torch-int8          MODEL, {"precision": "int8"}   dynamic quantization
 *   onnx-fp32           MODEL                          the export in ONNX Runtime, in the gateway
 *
 *   node --import tsx bench/engines/run.ts [--ms 2500] [--rounds 3] [--out FILE]
 *
 * Per model and concurrency (1 and 16), closed loops of OIP v2 binary requests, the variants
 * taking turns round by round so drift hits all alike; then the same in-process (requests handed
 * to a Gateway in this process), which leaves out the HTTP front every variant pays alike. Also:
 * each variant's largest difference from torch fp32 on the same inputs and how often the argmax
 * agrees; memory (worker RSS from /metrics, what the onnx sessions added to the gateway's RSS);
 * what describe_model says of each variant (its check, and why torch.compile is or is not there).
 * Target: the best variant at least 1.3x eager torch fp32 on the image model at concurrency 1,
 * with the answers unchanged (every row's argmax). Results go to bench/results/engines-<time>.json.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { defaultConfig } from '../../src/config.js';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
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
import type { Accuracy, EngineBlock, EnginesFile, VariantNote } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PYTHON = pythonExecutable();
const TARGET_RATIO = 1.3;
const CONCURRENCIES = [1, 16];
const BATCHING = { max_batch_size: 16, max_queue_delay_us: 1000 };
const BASELINE = 'torch-fp32';

/**
 * Each variant: the model copy serving it (suffix: its version of the demo model and its config),
 * the request parameters that pick it, and the variant the answer must name.
 */
const VARIANTS: { name: string; suffix: string; parameters: Record<string, string>; served: string }[] = [
  { name: BASELINE, suffix: '', parameters: { engine: 'torch' }, served: BASELINE },
  { name: 'torch-fp32-export', suffix: '-export', parameters: {}, served: BASELINE },
  { name: 'torch-fp32-compile', suffix: '-compile', parameters: {}, served: BASELINE },
  { name: 'torch-fp32-aoti', suffix: '-aoti', parameters: {}, served: BASELINE },
  { name: 'torch-bf16', suffix: '', parameters: { precision: 'bf16' }, served: 'torch-bf16' },
  { name: 'torch-int8', suffix: '', parameters: { precision: 'int8' }, served: 'torch-int8' },
  { name: 'onnx-fp32', suffix: '', parameters: {}, served: 'onnx-fp32' },
];

/** The model copies: the demo version each serves, and what its config adds. */
const COPIES: { suffix: string; version: string; extra: Record<string, unknown> }[] = [
  { suffix: '', version: '2', extra: { parameters: { precision: ['fp32', 'bf16', 'int8'] } } },
  { suffix: '-export', version: '1', extra: {} },
  { suffix: '-compile', version: '2', extra: { optimization: { torch: 'compile' } } },
  { suffix: '-aoti', version: '2', extra: { optimization: { torch: 'aoti' } } },
];

const { values: opts } = parseArgs({
  options: {
    ms: { type: 'string', default: '2500' },
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

/** One version of a demo model, as version 1 of a copy with the benchmark's batching and `extra`. */
function modelCopy(
  source: string,
  repo: string,
  name: string,
  version: string,
  extra: Record<string, unknown>,
): string {
  const dir = join(repo, name);
  cpSync(join(source, version), join(dir, '1'), { recursive: true });
  const config = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8')) as Record<string, unknown>;
  const versions = config.versions as Record<string, unknown>;
  const config_ = { ...config, name, versions: { '1': versions[version] }, default_version: '1', batching: BATCHING };
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config_, ...extra }));
  return dir;
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
async function outputOf(base: string, model: string, request: Request, parameters: Record<string, string>) {
  const prepared = request.withParameters(parameters);
  const res = await fetch(`${base}/v2/models/${model}/infer`, {
    method: 'POST',
    headers: Object.fromEntries(Object.entries(prepared.headers).map(([k, v]) => [k, String(v)])),
    body: new Uint8Array(prepared.body),
  });
  if (res.status !== 200) throw new Error(`${model}: HTTP ${res.status} ${await res.text()}`);
  const body = Buffer.from(await res.arrayBuffer());
  const header = Number(res.headers.get('inference-header-content-length'));
  const { parameters: answered } = JSON.parse(body.subarray(0, header).toString()) as {
    parameters: { variant: string };
  };
  return { variant: answered.variant, values: new Float32Array(new Uint8Array(body.subarray(header)).buffer) };
}

async function main(): Promise<void> {
  const blockMs = Number(opts.ms);
  const rounds = Number(opts.rounds);
  const work = mkdtempSync(join(tmpdir(), 'tg-bench-engines-'));
  const demo = join(ROOT, 'models');
  buildDemoModels(ROOT, PYTHON, demo);
  const repo = join(work, 'models');
  mkdirSync(repo);
  for (const m of MODELS)
    for (const copy of COPIES)
      modelCopy(join(demo, m.source), repo, `${m.source}${copy.suffix}`, copy.version, copy.extra);
  // AOTInductor packages are kept in the checkout's cache (.tensorgate/cache), as a server keeps them.
  const { child, base } = await startTensorgate(ROOT, repo, work);
  try {
    for (const m of MODELS)
      for (const copy of COPIES) await waitHealthy(base, `/v2/models/${m.source}${copy.suffix}/ready`, 600_000);
    await new Promise((r) => setTimeout(r, 1000));
    // The exports are added once the gateway has settled, so that their sessions show as a difference.
    const memory: EnginesFile['memory_mb'] = [];
    for (const m of MODELS) {
      const dir = join(repo, m.source);
      execFileSync(
        process.execPath,
        [join(ROOT, 'bin/tensorgate.js'), '--registry', join(work, 'export.db'), '--models', repo].concat([
          '--audit-log',
          join(work, 'export-audit.jsonl'),
          'register',
          dir,
          '--export',
          'onnx',
        ]),
        { stdio: ['ignore', 'inherit', 'inherit'] },
      );
      const gatewayBefore = rssMb(child.pid as number);
      const res = await fetch(`${base}/v2/repository/models/${m.source}/load`, { method: 'POST' });
      if (res.status !== 200) throw new Error(`loading ${m.source} with its export: ${await res.text()}`);
      memory.push({
        model: m.source,
        torch_worker: await workerRssMb(base, m.source),
        export_worker: await workerRssMb(base, `${m.source}-export`),
        compile_worker: await workerRssMb(base, `${m.source}-compile`),
        aoti_worker: await workerRssMb(base, `${m.source}-aoti`),
        onnx_in_gateway: round(rssMb(child.pid as number) - gatewayBefore, 1),
      });
    }
    const notes = await variantNotes(base);

    const accuracy: Accuracy[] = [];
    for (const m of MODELS) {
      const rows = m.item.length === 1 ? 64 : 4;
      const request = makeRequest(m, rows, 11);
      const outputs = await Promise.all(
        VARIANTS.map((v) => outputOf(base, `${m.source}${v.suffix}`, request, v.parameters)),
      );
      const baseline = outputs[0]?.values as Float32Array;
      VARIANTS.forEach((v, index) => {
        const { variant, values } = outputs[index] as { variant: string; values: Float32Array };
        if (variant !== v.served) throw new Error(`${v.name} was served by ${variant}`);
        if (v.name === BASELINE) return;
        let maxAbs = 0;
        let agree = 0;
        for (let r = 0; r < rows; r++) {
          let bestA = 0;
          let bestB = 0;
          for (let c = 0; c < m.classes; c++) {
            const i = r * m.classes + c;
            maxAbs = Math.max(maxAbs, Math.abs((baseline[i] ?? 0) - (values[i] ?? 0)));
            if ((baseline[i] ?? 0) > (baseline[r * m.classes + bestA] ?? 0)) bestA = c;
            if ((values[i] ?? 0) > (values[r * m.classes + bestB] ?? 0)) bestB = c;
          }
          if (bestA === bestB) agree++;
        }
        accuracy.push({ model: m.source, variant: v.name, rows, max_abs_diff: maxAbs, argmax_agree: agree });
      });
    }

    const blocks = await measureAll('http', (model, parameters, request) => {
      const prepared = request.withParameters(parameters);
      return async () => httpCall(base, `/v2/models/${model}/infer`, prepared);
    });
    await stopProcess(child);
    // The same variants without the HTTP front: requests handed to the gateway in this process.
    const gateway = await Gateway.open({
      ...defaultConfig(work),
      registry: join(work, 'r2.db'),
      modelsDir: repo,
      cacheDir: defaultConfig(ROOT).cacheDir,
    });
    try {
      await gateway.loadAll();
      // Each version's variants checked, so that every request goes where a settled server sends it.
      for (const m of MODELS) for (const { suffix } of COPIES) await gateway.loadModel(`${m.source}${suffix}`);
      blocks.push(
        ...(await measureAll('in-process', (model, parameters, request) => {
          const inputs = new Map([[request.input, tensorSource(request.tensor)]]);
          return async () => async () => {
            await gateway.inferTensors({ model, inputs, form: 'binary', parameters });
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
      baseline: BASELINE,
      blocks,
      accuracy,
      memory_mb: memory,
      variants: notes,
      target_ratio: TARGET_RATIO,
    };
    const out =
      opts.out ?? join(ROOT, 'bench', 'results', `engines-${file.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify(file, null, 2)}\n`);
    for (const b of blocks)
      process.stdout.write(
        `${b.surface} ${b.model} ${b.variant} c=${b.concurrency}: ${b.throughput} req/s, p50 ${b.latency_ms.p50} ms, p99 ${b.latency_ms.p99} ms\n`,
      );
    for (const a of accuracy)
      process.stdout.write(
        `${a.model} ${a.variant}: max |variant - torch fp32| ${a.max_abs_diff}, argmax agrees ${a.argmax_agree}/${a.rows}\n`,
      );
    process.stdout.write(`wrote ${out}\n`);
  } finally {
    await stopProcess(child);
    rmSync(work, { recursive: true, force: true });
  }

  /** Every variant of every model at every concurrency, the variants taking turns round by round. */
  async function measureAll(
    surface: EngineBlock['surface'],
    makeCall: (
      model: string,
      parameters: Record<string, string>,
      request: Request,
    ) => (client: number) => Promise<Call>,
  ): Promise<EngineBlock[]> {
    const blocks: EngineBlock[] = [];
    for (const m of MODELS) {
      const request = makeRequest(m, 1, 5);
      for (const concurrency of CONCURRENCIES) {
        const measured = new Map<string, Measured[]>(VARIANTS.map((v) => [v.name, []]));
        for (let r = 0; r < rounds; r++) {
          const order = r % 2 === 0 ? VARIANTS : [...VARIANTS].reverse();
          for (const v of order) {
            const call = makeCall(`${m.source}${v.suffix}`, v.parameters, request);
            const result = await closedLoop(call, concurrency, blockMs, 500);
            measured.get(v.name)?.push(result);
            process.stderr.write(
              `${surface} ${m.source} ${v.name} c=${concurrency} round ${r + 1}: ${result.throughput} req/s, p50 ${result.latency.p50} ms\n`,
            );
          }
        }
        for (const v of VARIANTS) {
          const runs = measured.get(v.name) ?? [];
          // The round with the median p50 stands for the latencies; throughput is the mean of the rounds.
          const byP50 = [...runs].sort((a, b) => a.latency.p50 - b.latency.p50);
          blocks.push({
            surface,
            model: m.source,
            variant: v.name,
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

/** What describe_model says of each variant of each benchmarked model: state, check, reason. */
async function variantNotes(base: string): Promise<VariantNote[]> {
  const client = new Client({ name: 'bench-engines', version: '0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  try {
    const notes: VariantNote[] = [];
    for (const m of MODELS)
      for (const model of COPIES.map((c) => `${m.source}${c.suffix}`)) {
        const result = await client.callTool({ name: 'describe_model', arguments: { model } });
        const info = result.structuredContent as { versions: { variants?: Omit<VariantNote, 'model'>[] }[] };
        for (const v of info.versions[0]?.variants ?? []) notes.push({ model, ...v });
      }
    return notes;
  } finally {
    await client.close();
  }
}

function makeRequest(m: (typeof MODELS)[number], rows: number, seed: number): Request {
  const shape = [rows, ...m.item];
  const data = inputs(rows * m.item.reduce((a, b) => a * b, 1), seed);
  const t = { input: m.input, output: m.output, shape, outputBytes: rows * m.classes * 4 };
  return {
    input: m.input,
    tensor: { dtype: 'float32', shape, data: new Uint8Array(data.buffer) },
    withParameters: (parameters) => binaryRequest(t, data, parameters),
  };
}

interface Request {
  input: string;
  tensor: Tensor;
  /** The OIP v2 binary request with these request parameters. */
  withParameters: (parameters: Record<string, string>) => Prepared;
}

await main();
