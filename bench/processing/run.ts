/**
 * bench/processing: "photo path -> top-5 labels" on the 224px image model, end to end: tensorgate's
 * own tool for a model with processing against a Python process doing it by hand and the Python
 * servers a user would write it with.
 *
 *   node --import tsx bench/processing/run.ts [--concurrency 1,16] [--seconds 6] [--warmup 2]
 *       [--systems all|tensorgate,ID,...] [--cpu-calls 200] [--out FILE]
 *
 * The model is the demo image-classifier (`.pt2`, ResNet-18 shape, 2 threads) registered as
 * `photo-classifier` with processing (resize the shorter side to 256, crop 224, ImageNet mean and
 * std, softmax top 5) and batching (16 rows, 0.5 ms). The input is a 320x240 PNG photo (177 KB)
 * on disk; every system reads and decodes it on each call. Systems:
 * - raw: the same pipeline in one Python process (bench/processing/raw.py): Pillow, the transforms
 *   in torch, the forward, top 5; one image at a time, and batches of 16 for the images/s a
 *   process can reach;
 * - tensorgate-tool-stdio / tensorgate-tool-http: the model's own MCP tool with `{"image": path}`
 *   over stdio (one client, calls in flight together) and Streamable HTTP (a session per client);
 * - litserve-http / litserve-mcp: LitServe with `decode_request` decoding the file and its dynamic
 *   batching (16, 0.5 ms), through its HTTP endpoint and its MCP endpoint;
 * - fastmcp-tool: a FastMCP tool doing the whole pipeline in the call.
 * Peers come from .tensorgate/peers (bash bench/peers/setup-peers.sh); missing ones are skipped.
 * Results go to bench/results/processing-<time>.json; bench/report.ts renders docs/benchmarks.md.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { buildDemoModels } from '../batching/models.js';
import { cpuMs, threadCpuMs } from '../cpu.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, round } from '../mcp-overhead/stats.js';
import type { Prepared } from '../oip/requests.js';
import {
  type Call,
  closedLoop,
  freePort,
  httpCall,
  type Measured,
  mcpHttpCall,
  selectSystems,
  startProcess,
  startTensorgate,
  stopAll,
  stopProcess,
  toolCall,
  waitHealthy,
} from '../peers/harness.js';
import { BATCHING, MODEL, makeModel, PROCESSING } from './model.js';
import { type ProcessingBlock, type ProcessingResult, SYSTEMS, type SystemId } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const { values: opts } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,16' },
    seconds: { type: 'string', default: '6' },
    warmup: { type: 'string', default: '2' },
    systems: { type: 'string', default: 'all' },
    // Sequential calls over which a gateway's CPU per image is taken, after its timed blocks.
    'cpu-calls': { type: 'string', default: '200' },
    out: { type: 'string' },
  },
});

/** The Python and torch versions the workers and the raw baseline run on. */
function runtimeOf(python: string): { python: string; torch: string } {
  const [py = '', torch = ''] = execFileSync(
    python,
    ['-c', 'import platform, torch; print(platform.python_version(), torch.__version__)'],
    {
      encoding: 'utf8',
    },
  )
    .trim()
    .split(' ');
  return { python: py, torch };
}

interface Target {
  system: SystemId;
  makeCall: (client: number) => Promise<Call>;
  /** The serving process (tensorgate's gateway), whose CPU per image is measured too. */
  pid?: number;
}

interface Session {
  targets: Target[];
  /** The server's own stage timings of one call, and its answer, where it reports them. */
  stages?: () => Promise<{ timings: Record<string, number>; labels: string[] }>;
  stop: () => Promise<void>;
}

interface Group {
  systems: SystemId[];
  peer: boolean;
  start(): Promise<Session>;
}

async function main(): Promise<void> {
  const started = performance.now();
  const levels = opts.concurrency.split(',').map(Number);
  const ms = Number(opts.seconds) * 1000;
  const warmupMs = Number(opts.warmup) * 1000;
  const systems = selectSystems(opts.systems, SYSTEMS);
  const cpuCalls = Number(opts['cpu-calls']);
  const python = pythonExecutable();
  const peersPython = join(ROOT, '.tensorgate', 'peers', 'bin', 'python');
  const work = mkdtempSync(join(tmpdir(), 'tg-processing-'));
  const demo = join(ROOT, 'models');
  buildDemoModels(ROOT, python, demo);
  const modelDir = makeModel(demo, join(work, 'models'));
  const photo = join(work, 'photo.png');
  const raw = join(ROOT, 'bench', 'processing', 'raw.py');
  execFileSync(python, [raw, '--photo', photo, '--make-photo']);
  const blocks: ProcessingBlock[] = [];
  const skipped: ProcessingResult['skipped'] = [];
  const stageSamples: Record<string, Record<string, number>> = {};
  const gatewayCpu: NonNullable<ProcessingResult['gateway_cpu']> = {};
  const record = (system: SystemId, concurrency: number, m: Measured) => {
    blocks.push({ system, concurrency, ...m });
    process.stderr.write(
      `${system} c=${concurrency}: p50 ${m.latency.p50} ms, p99 ${m.latency.p99} ms, ${m.throughput} images/s\n`,
    );
  };
  const skip = (system: SystemId, reason: string) => {
    skipped.push({ system, reason });
    process.stderr.write(`skipped ${system}: ${reason}\n`);
  };
  let rawBatched: number | undefined;
  let rawLabels: string[] | undefined;
  let tensorgateLabels: string[] | undefined;

  const peer = async (system: 'litserve' | 'fastmcp', ready: RegExp, health?: string) => {
    const port = await freePort();
    const script = join(ROOT, 'bench', 'processing', 'peer_servers.py');
    const { child } = await startProcess(
      peersPython,
      [script, system, '--model-dir', modelDir, '--port', String(port)],
      ROOT,
      ready,
    );
    const base = `http://127.0.0.1:${port}`;
    if (health)
      await waitHealthy(base, health).catch(async (err) => {
        await stopProcess(child);
        throw err;
      });
    return { base, child };
  };

  const groups: Group[] = [
    {
      systems: ['tensorgate-tool-stdio'],
      peer: false,
      async start() {
        const client = new Client({ name: 'bench-processing', version: '0' });
        const transport = new StdioClientTransport({
          command: process.execPath,
          args: [
            join(ROOT, 'bin', 'tensorgate.js'),
            '--models',
            join(work, 'models'),
            '--registry',
            join(work, 'stdio.db'),
            '--allow-root',
            work,
            'serve',
            '--stdio',
          ],
          cwd: ROOT,
          stderr: 'ignore',
        });
        await client.connect(transport);
        const call = toolCall(client, MODEL, { image: photo });
        await call(); // waits for the model to load
        return {
          targets: [
            {
              system: 'tensorgate-tool-stdio',
              makeCall: async () => call,
              ...(transport.pid ? { pid: transport.pid } : {}),
            },
          ],
          stages: async () => {
            const result = await client.callTool({ name: MODEL, arguments: { image: photo } });
            const answer = result.structuredContent as {
              timings: Record<string, number>;
              predictions: { label: string }[][];
            };
            return { timings: answer.timings, labels: (answer.predictions[0] ?? []).map((p) => p.label) };
          },
          stop: () => client.close(),
        };
      },
    },
    {
      systems: ['tensorgate-tool-http'],
      peer: false,
      async start() {
        const { child, base } = await startTensorgate(ROOT, join(work, 'models'), work, undefined, [
          '--allow-root',
          work,
        ]);
        await waitHealthy(base, `/v2/models/${MODEL}/ready`);
        return {
          targets: [
            {
              system: 'tensorgate-tool-http',
              makeCall: () => mcpHttpCall(`${base}/mcp`, MODEL, { image: photo }),
              ...(child.pid ? { pid: child.pid } : {}),
            },
          ],
          stop: () => stopProcess(child),
        };
      },
    },
    {
      systems: ['litserve-http', 'litserve-mcp'],
      peer: true,
      async start() {
        const { base, child } = await peer('litserve', /Uvicorn running|Application startup complete/, '/health');
        const body: Prepared = {
          body: Buffer.from(JSON.stringify({ path: photo })),
          headers: { 'content-type': 'application/json' },
        };
        return {
          targets: [
            { system: 'litserve-http', makeCall: async () => httpCall(base, '/predict', body) },
            {
              system: 'litserve-mcp',
              makeCall: () => mcpHttpCall(`${base}/mcp/`, 'predict', { request: { path: photo } }),
            },
          ],
          stop: () => stopProcess(child),
        };
      },
    },
    {
      systems: ['fastmcp-tool'],
      peer: true,
      async start() {
        const { base, child } = await peer('fastmcp', /Uvicorn running/);
        return {
          targets: [
            { system: 'fastmcp-tool', makeCall: () => mcpHttpCall(`${base}/mcp`, 'classify', { path: photo }) },
          ],
          stop: () => stopProcess(child),
        };
      },
    },
  ];

  try {
    if (systems.includes('raw')) {
      const calls = Math.max(20, Math.round(ms / 60));
      const out = execFileSync(python, [raw, '--model-dir', modelDir, '--photo', photo, '--calls', String(calls)], {
        encoding: 'utf8',
      });
      const parsed = JSON.parse(out) as {
        ms: number[];
        batched_images_per_s: number;
        answer: { label: string }[];
      };
      rawLabels = parsed.answer.map((p) => p.label);
      const mean = parsed.ms.reduce((a, b) => a + b, 0) / parsed.ms.length;
      record('raw', 1, { latency: distribution(parsed.ms), throughput: round(1000 / mean, 1), client_cpu_percent: 0 });
      rawBatched = parsed.batched_images_per_s;
      process.stderr.write(`raw batches of 16: ${rawBatched} images/s\n`);
    }
    const peersInstalled = existsSync(peersPython);
    for (const group of groups) {
      const wanted = group.systems.filter((s) => systems.includes(s));
      if (wanted.length === 0) continue;
      if (group.peer && !peersInstalled) {
        for (const s of wanted) skip(s, 'not installed: run bash bench/peers/setup-peers.sh');
        continue;
      }
      let session: Session;
      try {
        session = await group.start();
      } catch (err) {
        for (const s of wanted) skip(s, `did not start: ${String(err).slice(0, 300)}`);
        continue;
      }
      try {
        for (const target of session.targets.filter((t) => wanted.includes(t.system)))
          for (const concurrency of levels) {
            try {
              record(target.system, concurrency, await closedLoop(target.makeCall, concurrency, ms, warmupMs));
            } catch (err) {
              skip(target.system, `failed at concurrency ${concurrency}: ${String(err).slice(0, 300)}`);
              break;
            }
          }
        for (const target of session.targets.filter((t) => wanted.includes(t.system) && t.pid !== undefined)) {
          // The gateway's own CPU per image, all its threads and its main thread (the one every
          // request passes through), over sequential calls.
          const pid = target.pid as number;
          const call = await target.makeCall(0);
          const before = cpuMs(pid).self;
          const mainBefore = threadCpuMs(pid);
          for (let i = 0; i < cpuCalls; i++) await call();
          gatewayCpu[target.system] = {
            calls: cpuCalls,
            ms_per_image: round((cpuMs(pid).self - before) / cpuCalls),
            main_ms_per_image: round((threadCpuMs(pid) - mainBefore) / cpuCalls),
          };
        }
        if (session.stages) {
          // The median of a few quiet calls' own stage timings: where a call's time goes.
          const runs: Record<string, number>[] = [];
          for (let i = 0; i < 21; i++) {
            const { timings, labels } = await session.stages();
            runs.push(timings);
            tensorgateLabels = labels;
          }
          const median = (key: string) => {
            const values = runs.map((t) => t[key] ?? 0).sort((a, b) => a - b);
            return values[Math.floor(values.length / 2)] as number;
          };
          stageSamples[wanted[0] as string] = Object.fromEntries(Object.keys(runs[0] ?? {}).map((k) => [k, median(k)]));
        }
      } finally {
        await session.stop();
      }
    }
  } finally {
    await stopAll();
    rmSync(work, { recursive: true, force: true });
  }

  const p50 = (system: SystemId, c: number) => blocks.find((b) => b.system === system && b.concurrency === c);
  const rawP50 = p50('raw', 1)?.latency.p50;
  const top = Math.max(...levels);
  const litserve = p50('litserve-http', top)?.throughput;
  const targets: ProcessingResult['targets'] = [];
  for (const system of ['tensorgate-tool-stdio', 'tensorgate-tool-http'] as const) {
    const one = p50(system, 1)?.latency.p50;
    if (one !== undefined && rawP50 !== undefined)
      targets.push({
        target: `${system} p50 at concurrency 1`,
        goal: 'raw + 1.5 ms',
        measured: one,
        allowed: round(rawP50 + 1.5),
        met: one <= rawP50 + 1.5,
      });
    const many = p50(system, top)?.throughput;
    if (many !== undefined && litserve !== undefined)
      targets.push({
        target: `${system} images/s at concurrency ${top}`,
        goal: "2x LitServe's",
        measured: many,
        allowed: round(2 * litserve, 1),
        met: many >= 2 * litserve,
      });
  }
  const result: ProcessingResult = {
    benchmark: 'processing',
    date: new Date().toISOString(),
    machine: machineInfo(ROOT, runtimeOf(python)),
    config: {
      concurrency: levels,
      seconds: ms / 1000,
      warmup_ms: warmupMs,
      batching: BATCHING,
      processing: PROCESSING,
      photo: '320x240 PNG, 177 KB',
      systems,
    },
    ...(rawBatched !== undefined ? { raw_batched_images_per_s: rawBatched } : {}),
    // The same top 5 from the hand-written pipeline and tensorgate's processing: the same work.
    answers: { raw: rawLabels ?? [], tensorgate: tensorgateLabels ?? [] },
    stages: stageSamples,
    gateway_cpu: gatewayCpu,
    skipped,
    blocks,
    targets,
    duration_s: round((performance.now() - started) / 1000, 1),
  };
  const out =
    opts.out ?? join(ROOT, 'bench', 'results', `processing-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`wrote ${out}\n`);
}

main().catch(async (err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  await stopAll();
  process.exit(1);
});
