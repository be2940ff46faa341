/**
 * bench/peers: tensorgate against the systems users would pick instead, same machine, same run,
 * same TorchScript files, same input.
 *
 *   bash bench/peers/run.sh                    # everything: setup, peers, this, the report
 *   node --import tsx bench/peers/run.ts [--models tabular,image] [--concurrency 1,8,32]
 *       [--seconds 4] [--warmup 1] [--systems all|tensorgate,ID,...] [--out FILE]
 *   node --import tsx bench/peers/run.ts --plot bench/results/peers-<time>.json   # re-draw the plot
 *
 * Systems (results.ts lists the ids; systems.ts starts them), each server started alone, one
 * model at a time, stopped before the next:
 * - raw: the TorchScript forward inside one Python process (bench/mcp-overhead/baseline.py), the
 *   physical limit; concurrency 1 only (one process runs one forward at a time).
 * - tensorgate, dynamic batching on (max 64 rows, 0.5 ms): MCP over stdio (one client, the calls
 *   in flight together on its pipe) and over Streamable HTTP (a session per client), the input by
 *   `{path}` to a .npy file and as `{b64}`; OIP v2 REST with JSON, binary tensor data and system
 *   shared memory.
 * - fastmcp-list: the user report's setup, FastMCP with the tensor as a JSON list.
 * - kserve-oip-binary: the KServe model server, OIP v2 with tensorgate's binary request
 *   (KServe has no batching of its own outside Kubernetes).
 * - litserve-http / litserve-mcp: LitServe with its batching, its HTTP and its MCP endpoint.
 * - ray-serve-http: Ray Serve with `@serve.batch`, through its HTTP proxy.
 * Every system logs as it does by default. Closed-loop clients in this process send one row per
 * request for a fixed time after a warm-up; the client's CPU is reported per block. A peer that
 * is not installed or does not start is reported as skipped, with why. Results go to
 * bench/results/peers-<time>.json (unless --out is given, the plot too: docs/images/peers.svg and,
 * with Chromium installed, .png); bench/report.ts renders them into docs/benchmarks.md.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { encodeNpy } from '../../src/tensor/npy.js';
import { buildDemoModels, makeVariant } from '../batching/models.js';
import { BaselineProcess } from '../mcp-overhead/clients.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, round } from '../mcp-overhead/stats.js';
import { closedLoop, type Measured, selectSystems, stopAll } from './harness.js';
import { writePeersPlot } from './plot.js';
import { type PeerBlock, type PeersResult, SYSTEMS, type SystemId } from './results.js';
import { type Context, GROUPS, type ModelCase } from './systems.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const BATCHING = { max_batch_size: 64, max_queue_delay_us: 500 };
const TENSORS = {
  tabular: { input: 'features', output: 'probabilities', shape: [1, 4], outputBytes: 12 },
  image: { input: 'image', output: 'logits', shape: [1, 3, 224, 224], outputBytes: 40 },
};

const { values: opts } = parseArgs({
  options: {
    models: { type: 'string', default: 'tabular,image' },
    concurrency: { type: 'string', default: '1,8,32' },
    seconds: { type: 'string', default: '4' },
    warmup: { type: 'string', default: '1' },
    systems: { type: 'string', default: 'all' },
    out: { type: 'string' },
    plot: { type: 'string' },
    'plot-to': { type: 'string', default: join(ROOT, 'docs', 'images', 'peers') },
  },
});

/** One row of seeded values (the same for every system). */
function makeInput(n: number): Float32Array {
  let seed = 42;
  return Float32Array.from({ length: n }, () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  });
}

/** The peers' versions, or undefined when bench/peers/setup-peers.sh has not installed them. */
function peerVersions(peersPython: string): Record<string, string> | undefined {
  if (!existsSync(peersPython)) return undefined;
  const script =
    'import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in ["mcp", "fastmcp", "litserve", "kserve", "ray", "torch"]}))';
  return JSON.parse(execFileSync(peersPython, ['-c', script], { encoding: 'utf8' })) as Record<string, string>;
}

/** Draws the throughput vs p99 plot of a result file next to docs/benchmarks.md. */
async function plot(result: PeersResult): Promise<void> {
  const files = await writePeersPlot(result, opts['plot-to']);
  process.stdout.write(`wrote ${files.join(', ')}\n`);
}

async function main(): Promise<void> {
  if (opts.plot) {
    await plot(JSON.parse(readFileSync(opts.plot, 'utf8')) as PeersResult);
    return;
  }
  const started = performance.now();
  const models = opts.models.split(',') as ModelCase['key'][];
  const levels = opts.concurrency.split(',').map(Number);
  const ms = Number(opts.seconds) * 1000;
  const warmupMs = Number(opts.warmup) * 1000;
  const systems = selectSystems(opts.systems, SYSTEMS);
  const work = mkdtempSync(join(tmpdir(), 'tg-peers-'));
  const ctx: Context = {
    root: ROOT,
    work,
    python: pythonExecutable(),
    peersPython: join(ROOT, '.tensorgate', 'peers', 'bin', 'python'),
    maxConcurrency: Math.max(...levels),
  };
  const peers = peerVersions(ctx.peersPython);
  const blocks: PeerBlock[] = [];
  const skipped: PeersResult['skipped'] = [];
  const skip = (system: SystemId, reason: string, model?: string) => {
    skipped.push({ system, reason, ...(model ? { model } : {}) });
    process.stderr.write(`skipped ${system}${model ? ` (${model})` : ''}: ${reason}\n`);
  };
  const record = (system: SystemId, model: string, concurrency: number, m: Measured) => {
    blocks.push({ system, model, concurrency, ...m });
    process.stderr.write(
      `${model} ${system} c=${concurrency}: p50 ${m.latency.p50} ms, p99 ${m.latency.p99} ms, ${m.throughput}/s, client CPU ${m.client_cpu_percent}%\n`,
    );
  };

  const demo = join(ROOT, 'models');
  buildDemoModels(ROOT, ctx.python, demo);
  const cases: ModelCase[] = models.map((key) => {
    const variant = makeVariant(key, demo, join(work, 'models'), BATCHING);
    const tensors = TENSORS[key];
    const data = makeInput(tensors.shape.reduce((a, b) => a * b, 1));
    const npy = join(work, `${key}.npy`);
    writeFileSync(npy, encodeNpy({ dtype: 'float32', shape: tensors.shape, data: new Uint8Array(data.buffer) }));
    return { key, name: variant.registered_as, dir: variant.dir, npy, data, tensors };
  });

  try {
    for (const c of cases) {
      if (systems.includes('raw')) {
        const raw = new BaselineProcess(ctx.python, c.dir, c.npy, 20);
        await raw.ready;
        const n = Math.max(50, Math.round(ms / (c.key === 'image' ? 30 : 0.1)));
        const samples = (await raw.run(n)).map((s) => s.ms);
        await raw.close();
        const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
        record('raw', c.key, 1, {
          latency: distribution(samples),
          throughput: round(1000 / mean, 1),
          client_cpu_percent: 0,
        });
      }
      for (const group of GROUPS) {
        const wanted = group.systems.filter((s) => systems.includes(s));
        if (wanted.length === 0) continue;
        if (group.peer && !peers) {
          for (const s of wanted) skip(s, 'not installed: run bash bench/peers/setup-peers.sh', c.key);
          continue;
        }
        let session: Awaited<ReturnType<typeof group.start>>;
        try {
          session = await group.start(c, ctx);
        } catch (err) {
          for (const s of wanted) skip(s, `did not start: ${String(err).slice(0, 300)}`, c.key);
          continue;
        }
        try {
          for (const target of session.targets.filter((t) => wanted.includes(t.system))) {
            for (const concurrency of levels) {
              try {
                record(target.system, c.key, concurrency, await closedLoop(target.makeCall, concurrency, ms, warmupMs));
              } catch (err) {
                skip(target.system, `failed at concurrency ${concurrency}: ${String(err).slice(0, 300)}`, c.key);
                break;
              }
            }
          }
        } finally {
          await session.stop();
        }
      }
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }

  const result: PeersResult = {
    benchmark: 'peers',
    date: new Date().toISOString(),
    machine: machineInfo(ROOT),
    peers: peers ?? {},
    config: { models, concurrency: levels, seconds: ms / 1000, warmup_ms: warmupMs, batching: BATCHING, systems },
    skipped,
    blocks,
    duration_s: round((performance.now() - started) / 1000, 1),
  };
  const out =
    opts.out ?? join(ROOT, 'bench', 'results', `peers-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`wrote ${out}\n`);
  if (!opts.out) await plot(result);
}

main().catch(async (err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  await stopAll();
  process.exit(1);
});
