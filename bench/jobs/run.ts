/**
 * bench/jobs: a batch job over distinct photos against a Python loop doing the same by hand, and
 * what the job does to interactive calls of the same model, in the same run.
 *
 *   node --import tsx bench/jobs/run.ts [--images 2000] [--seconds 8] [--sporadic 10]
 *                                       [--max-pass-ms MS] [--out FILE]
 *
 * The model is bench/processing's `photo-classifier` (the demo image model with processing:
 * resize to 256, crop 224, normalise, top 5; batching 16 rows, 0.5 ms). The items are `--images`
 * distinct 320x240 JPEG photos written for the run. Measured:
 * - raw: one Python process looping over the files, Pillow + the transforms + batches of 16
 *   through the forward pass (bench/jobs/raw_loop.py);
 * - job: `start_job` over the folder, alone, from its start to `completed`, waited for in the call
 *   (`"wait": true`: polling `get_job` would take CPU from the job on 2 cores)
 *   (items/s; the results file is checked to hold every item once);
 * - pre-decoded: the same model without processing (`photo-tensors`, the same batching) sent
 *   224x224 tensors over OIP v2 binary by 16 closed-loop clients, batched by the server: what
 *   tensorgate does when nothing is left to decode, for scale;
 * - interactive: the model's tool on one photo, closed loop at concurrency 1, without a job and
 *   then while a second job runs (p50, p99; their ratio is the bound the job keeps), and the
 *   job's items/s meanwhile (what it gives up to them);
 * - sporadic: `--sporadic` single calls 1.5 s apart while that job runs, as an agent calls now and
 *   then: each finds the job at its full request size (it steps back only for a second after a
 *   call), so each may wait for one of its passes (max_pass_ms, 100 ms by default); the closed
 *   loop above mostly finds the model free of the job, which waits for a pause in the calls.
 * Results go to bench/results/jobs-<time>.json; bench/report.ts renders docs/benchmarks.md.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { buildDemoModels } from '../batching/models.js';
import { cpuMs } from '../cpu.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, round } from '../mcp-overhead/stats.js';
import { binaryRequest } from '../oip/requests.js';
import { closedLoop, httpCall, startTensorgate, stopProcess, toolCall, waitHealthy } from '../peers/harness.js';
import { BATCHING, MODEL, makeModel } from '../processing/model.js';
import type { JobsFile } from './render.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

const { values: opts } = parseArgs({
  options: {
    images: { type: 'string', default: '2000' },
    seconds: { type: 'string', default: '8' },
    sporadic: { type: 'string', default: '10' },
    'max-pass-ms': { type: 'string' },
    out: { type: 'string' },
  },
});

interface Job {
  id: string;
  state: string;
  items: number;
  done: number;
  failed: number;
  error?: string;
}

async function main(): Promise<void> {
  const images = Number(opts.images);
  const ms = Number(opts.seconds) * 1000;
  const python = pythonExecutable();
  const work = mkdtempSync(join(tmpdir(), 'tg-bench-jobs-'));
  const demo = join(ROOT, 'models');
  buildDemoModels(ROOT, python, demo);
  const modelDir = makeModel(demo, join(work, 'models'));
  const tensors = makeTensorModel(demo, join(work, 'models'));
  const photos = join(work, 'photos');
  const loop = join(ROOT, 'bench', 'jobs', 'raw_loop.py');
  execFileSync(python, [loop, '--make-photos', photos, '--count', String(images)]);
  const files = readdirSync(photos)
    .sort()
    .map((f) => join(photos, f));
  writeFileSync(join(work, 'files.txt'), `${files.join('\n')}\n`);

  const raw = JSON.parse(
    execFileSync(python, [loop, '--model-dir', modelDir, '--list', join(work, 'files.txt')], { encoding: 'utf8' }),
  ) as { items: number; seconds: number; items_per_s: number; cores: number };
  console.log(`raw loop: ${raw.items} photos in ${raw.seconds} s, ${raw.items_per_s} items/s`);

  const { child, base } = await startTensorgate(ROOT, join(work, 'models'), work, undefined, ['--allow-root', work]);
  const client = new Client({ name: 'bench-jobs', version: '0' });
  try {
    await waitHealthy(base, `/v2/models/${MODEL}/ready`);
    await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    const call = async <T>(tool: string, args: Record<string, unknown>): Promise<T> => {
      const result = await client.callTool({ name: tool, arguments: args }, { timeout: 3_600_000 });
      if (result.isError) throw new Error(`${tool}: ${JSON.stringify(result.content)}`);
      return result.structuredContent as T;
    };
    const interactive = () =>
      closedLoop(async () => toolCall(client, MODEL, { image: files[0] }), 1, ms, Math.min(2000, ms / 4));

    const alone = await interactive();
    console.log(`interactive alone: p50 ${alone.latency.p50} ms, p99 ${alone.latency.p99} ms`);

    await waitHealthy(base, `/v2/models/${TENSOR_MODEL}/ready`);
    const pixels = Float32Array.from({ length: 3 * 224 * 224 }, (_, i) => Math.sin(i) * 0.5);
    const oip = binaryRequest({ ...tensors, shape: [1, 3, 224, 224], outputBytes: 40 }, pixels);
    const predecoded = await closedLoop(
      async () => httpCall(base, `/v2/models/${TENSOR_MODEL}/infer`, oip),
      16,
      ms,
      Math.min(2000, ms / 4),
    );
    console.log(`pre-decoded tensors over OIP v2 binary, 16 clients: ${predecoded.throughput} images/s`);

    const start = async (name: string, wait = false) =>
      call<Job>('start_job', {
        model: MODEL,
        items: { folder: photos },
        results: join(work, `${name}.jsonl`),
        ...(opts['max-pass-ms'] ? { max_pass_ms: Number(opts['max-pass-ms']) } : {}),
        wait,
      });
    const wait = async (id: string, until: (j: Job) => boolean): Promise<Job> => {
      for (;;) {
        const job = await call<Job>('get_job', { id });
        if (until(job)) return job;
        await new Promise((r) => setTimeout(r, 20));
      }
    };

    const t0 = performance.now();
    const cpu0 = cpuMs(child.pid as number);
    // Waited for in the call itself: polling get_job would take CPU from the job on 2 cores.
    const finished = await start('job-alone', true);
    const jobSeconds = (performance.now() - t0) / 1000;
    const cpu1 = cpuMs(child.pid as number);
    // Cores in use over the job: the gateway's own (MCP, reading files, commits) and the workers'.
    const cores = {
      gateway: round((cpu1.self - cpu0.self) / 1000 / jobSeconds, 2),
      workers: round((cpu1.children - cpu0.children) / 1000 / jobSeconds, 2),
    };
    if (finished.state !== 'completed') throw new Error(`the job ended ${finished.state}: ${finished.error}`);
    const written = readFileSync(join(work, 'job-alone.jsonl'), 'utf8').trim().split('\n');
    const indices = new Set(written.map((l) => (JSON.parse(l) as { index: number }).index));
    if (written.length !== images || indices.size !== images || finished.failed !== 0)
      throw new Error(`the results file holds ${written.length} lines, ${indices.size} distinct, for ${images} photos`);
    const jobRate = round(images / jobSeconds, 1);
    console.log(
      `job alone: ${images} photos in ${round(jobSeconds, 2)} s, ${jobRate} items/s; cores: gateway ${cores.gateway}, workers ${cores.workers} (raw loop ${raw.cores})`,
    );

    const second = await start('job-with-calls');
    await wait(second.id, (j) => j.done > 0);
    // The job's own pace while the closed loop keeps the model busy: what it gives up.
    const doneBefore = (await call<Job>('get_job', { id: second.id })).done;
    const loopStart = performance.now();
    const during = await interactive();
    const jobPaceDuring = round(
      ((await call<Job>('get_job', { id: second.id })).done - doneBefore) / ((performance.now() - loopStart) / 1000),
      1,
    );
    const sporadicMs: number[] = [];
    for (let i = 0; i < Number(opts.sporadic); i++) {
      await new Promise((r) => setTimeout(r, 1500));
      const t = performance.now();
      await toolCall(client, MODEL, { image: files[i % files.length] })();
      sporadicMs.push(performance.now() - t);
    }
    const sporadic = distribution(sporadicMs);
    const atEnd = await call<Job>('get_job', { id: second.id });
    if (atEnd.state !== 'running')
      throw new Error(`the second job ended (${atEnd.state}) before the interactive calls did; use more --images`);
    await call<Job>('cancel_job', { id: second.id });
    console.log(
      `interactive during a job: p50 ${during.latency.p50} ms, p99 ${during.latency.p99} ms; the job meanwhile ${jobPaceDuring} items/s`,
    );
    console.log(`sporadic calls during a job: p50 ${sporadic.p50} ms, max ${sporadic.max} ms`);

    const result: JobsFile = {
      benchmark: 'jobs',
      date: new Date().toISOString(),
      machine: machineInfo(ROOT),
      config: {
        images,
        seconds: ms / 1000,
        model: MODEL,
        batch: 16,
        ...(opts['max-pass-ms'] ? { max_pass_ms: Number(opts['max-pass-ms']) } : {}),
      },
      raw,
      job: {
        seconds: round(jobSeconds, 3),
        items_per_s: jobRate,
        ratio_to_raw: round(jobRate / raw.items_per_s, 3),
        cores,
      },
      predecoded_oip: { clients: 16, items_per_s: predecoded.throughput, latency: predecoded.latency },
      interactive: {
        alone: alone.latency,
        during_job: during.latency,
        p99_ratio: round(during.latency.p99 / alone.latency.p99, 2),
        job_items_per_s_during: jobPaceDuring,
        sporadic_during_job: sporadic,
      },
    };
    const out = opts.out ?? join(ROOT, 'bench', 'results', `jobs-${result.date.slice(0, 19).replace(/:/g, '-')}.json`);
    writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    console.log(
      `job / raw: ${result.job.ratio_to_raw} (target 0.9); interactive p99 during / alone: ${result.interactive.p99_ratio} (target 2); wrote ${out}`,
    );
  } finally {
    await client.close().catch(() => {});
    await stopProcess(child);
    rmSync(work, { recursive: true, force: true });
  }
}

/** The demo image model without processing, batched like the job's: it takes 224x224 tensors. */
const TENSOR_MODEL = 'photo-tensors';
function makeTensorModel(demo: string, models: string): { input: string; output: string } {
  const dir = join(models, TENSOR_MODEL);
  cpSync(join(demo, 'image-classifier'), dir, { recursive: true, filter: (src) => !src.includes('/2') });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as {
    inputs: { name: string }[];
    outputs: { name: string }[];
  } & Record<string, unknown>;
  config.name = TENSOR_MODEL;
  config.versions = { '1': (config.versions as Record<string, unknown>)['1'] };
  config.parameters = { precision: ['fp32'] };
  config.batching = BATCHING;
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  return { input: config.inputs[0]?.name as string, output: config.outputs[0]?.name as string };
}

await main();
