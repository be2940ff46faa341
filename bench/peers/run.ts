/**
 * bench/peers: tensorgate against the systems users would pick instead, same machine, same run,
 * same TorchScript files, same input.
 *
 *   bash bench/peers/setup-peers.sh            # once: the peers, in .tensorgate/peers
 *   node --import tsx bench/peers/run.ts [--models tabular,image] [--concurrency 1,8,32]
 *                                        [--seconds 4] [--out FILE]
 *
 * Systems (each started alone, one model at a time, stopped before the next):
 * - raw: the TorchScript forward inside one Python process (bench/mcp-overhead/baseline.py), the
 *   physical limit; concurrency 1 only (one process runs one forward at a time).
 * - tensorgate-mcp: `tensorgate serve --http`, the official MCP client over Streamable HTTP, the
 *   input as {"b64", "shape"}; dynamic batching on (max 64 rows, 0.5 ms).
 * - tensorgate-oip: the same server, OIP v2 REST with the input as binary tensor data.
 * - mcp-list: the user report's setup (bench/peers/mcp_list_server.py): FastMCP, the tensor as a
 *   JSON list, the model loaded once, inference_mode.
 * - kserve: the KServe model server (bench/oip/kserve_server.py), OIP v2 with the same binary
 *   request as tensorgate-oip; KServe has no built-in batching.
 * - litserve: LitServe's HTTP endpoint with its batching (max 64, 0.5 ms), JSON in and out.
 * Every system runs with its default logging (tensorgate's request log, uvicorn's access log).
 * Closed-loop clients in this process (one MCP session or one keep-alive socket each) send one
 * row per request for a fixed time after a warm-up; the client's CPU use is reported per block.
 * Results go to bench/results/peers-<time>.json; bench/report.ts renders them.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { encodeNpy } from '../../src/tensor/npy.js';
import { makeVariant } from '../batching/models.js';
import { BaselineProcess } from '../mcp-overhead/clients.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, round } from '../mcp-overhead/stats.js';
import type { PeerBlock, PeersResult, SystemId } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PYTHON = process.env.TENSORGATE_PYTHON ?? '/usr/bin/python3';
const PEERS_PYTHON = join(ROOT, '.tensorgate', 'peers', 'bin', 'python');
const BATCHING = { max_batch_size: 64, max_queue_delay_us: 500, preferred_batch_sizes: [] };
const WARMUP_MS = 1000;

const { values: opts } = parseArgs({
  options: {
    models: { type: 'string', default: 'tabular,image' },
    concurrency: { type: 'string', default: '1,8,32' },
    seconds: { type: 'string', default: '4' },
    out: { type: 'string' },
  },
});

interface ModelCase {
  key: 'tabular' | 'image';
  /** The batched copy's registered name (also the name KServe serves it under). */
  name: string;
  dir: string;
  input: string;
  shape: number[];
}

/** One row of seeded values (the same for every system). */
function makeInput(shape: number[]): Float32Array {
  const n = shape.reduce((a, b) => a * b, 1);
  let seed = 42;
  return Float32Array.from({ length: n }, () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  });
}

function nested(data: Float32Array, shape: number[]): unknown {
  if (shape.length === 1) return Array.from(data);
  const [first, ...rest] = shape as [number, ...number[]];
  const step = rest.reduce((a, b) => a * b, 1);
  return Array.from({ length: first }, (_, i) => nested(data.subarray(i * step, (i + 1) * step), rest));
}

type Call = () => Promise<void>;

/** Servers started and not yet stopped: stopped on the way out, whatever happens. */
const running = new Set<ChildProcess>();

/** Runs `concurrency` closed loops of `call` for the warm-up, then measures for `ms`. */
async function closedLoop(makeCall: () => Promise<Call>, concurrency: number, ms: number) {
  const calls = await Promise.all(Array.from({ length: concurrency }, makeCall));
  const latencies: number[] = [];
  let measuring = false;
  let stop = false;
  const loops = calls.map(async (call) => {
    while (!stop) {
      const start = performance.now();
      await call();
      if (measuring) latencies.push(performance.now() - start);
    }
  });
  await new Promise((r) => setTimeout(r, WARMUP_MS));
  measuring = true;
  const cpuStart = process.cpuUsage();
  const wallStart = performance.now();
  await new Promise((r) => setTimeout(r, ms));
  measuring = false;
  const wall = performance.now() - wallStart;
  const cpu = process.cpuUsage(cpuStart);
  stop = true;
  await Promise.all(loops);
  return {
    latency: distribution(latencies),
    throughput: round((latencies.length / wall) * 1000, 1),
    client_cpu_percent: round(((cpu.user + cpu.system) / 1000 / wall) * 100, 1),
  };
}

function start(command: string, args: string[], ready: RegExp): Promise<ChildProcess> {
  // A process group of its own: LitServe and Ray start worker processes, stopped with it.
  const child = spawn(command, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  running.add(child);
  return new Promise((resolvePromise, reject) => {
    let seen = '';
    // Look for the ready line, then only drain: servers log every request, and a growing string
    // here would charge the load generator for it.
    const onData = (chunk: Buffer) => {
      seen = (seen + chunk.toString()).slice(-4096);
      if (!ready.test(seen)) return;
      child.stdout?.off('data', onData).resume();
      child.stderr?.off('data', onData).resume();
      resolvePromise(child);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) =>
      reject(new Error(`${command} ${args.join(' ')} exited with ${code}: ${seen.slice(-2000)}`)),
    );
  });
}

/** Stops a server and every process it started (its process group). */
async function stop(child: ChildProcess): Promise<void> {
  running.delete(child);
  const group = -(child.pid as number);
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(group, sig);
    } catch {
      // The group is gone already.
    }
  };
  const exited = child.exitCode === null ? new Promise((r) => child.once('exit', r)) : Promise.resolve();
  signal('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
  signal('SIGKILL');
  // Idle peers poll; let the machine settle before the next system is measured.
  await new Promise((r) => setTimeout(r, 500));
}

async function mcpCall(url: string, tool: string, args: Record<string, unknown>): Promise<Call> {
  const client = new Client({ name: 'bench-peers', version: '0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return async () => {
    const result = await client.callTool({ name: tool, arguments: args });
    if (result.isError) throw new Error(JSON.stringify(result.content));
  };
}

function httpCall(port: number, path: string, headers: Record<string, string | number>, body: Buffer): Call {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  return () =>
    new Promise<void>((ok, fail) => {
      const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? ok() : fail(new Error(`${path}: HTTP ${res.statusCode}`))));
      });
      req.on('error', fail);
      req.end(body);
    });
}

async function main(): Promise<void> {
  const models = opts.models.split(',') as ModelCase['key'][];
  const levels = opts.concurrency.split(',').map(Number);
  const ms = Number(opts.seconds) * 1000;
  const work = mkdtempSync(join(tmpdir(), 'tg-peers-'));
  const repo = join(work, 'models');
  const blocks: PeerBlock[] = [];
  const record = (system: SystemId, model: string, concurrency: number, m: Awaited<ReturnType<typeof closedLoop>>) => {
    blocks.push({ system, model, concurrency, ...m });
    process.stderr.write(
      `${model} ${system} c=${concurrency}: p50 ${m.latency.p50} ms, p99 ${m.latency.p99} ms, ${m.throughput}/s, client CPU ${m.client_cpu_percent}%\n`,
    );
  };

  const cases: ModelCase[] = models.map((key) => {
    const variant = makeVariant(key, join(ROOT, 'models'), repo, BATCHING);
    const shape = key === 'tabular' ? [1, 4] : [1, 3, 224, 224];
    const input = join(work, `${key}.npy`);
    writeFileSync(input, encodeNpy({ dtype: 'float32', shape, data: new Uint8Array(makeInput(shape).buffer) }));
    return { key, name: variant.registered_as, dir: variant.dir, input, shape };
  });

  for (const c of cases) {
    const data = makeInput(c.shape);
    const bytes = Buffer.from(data.buffer);

    // raw PyTorch, concurrency 1
    const raw = new BaselineProcess(PYTHON, c.dir, c.input, 20);
    await raw.ready;
    {
      const samples = (await raw.run(Math.max(50, Math.round(ms / (c.key === 'image' ? 30 : 0.1))))).map((s) => s.ms);
      const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
      record('raw', c.key, 1, {
        latency: distribution(samples),
        throughput: round(1000 / mean, 1),
        client_cpu_percent: 0,
      });
    }
    await raw.close();

    // tensorgate: MCP and OIP v2 on one server
    const server = await start(
      process.execPath,
      [
        join(ROOT, 'bin', 'tensorgate.js'),
        '--models',
        dirname(c.dir),
        '--registry',
        join(work, 'registry.db'),
        'serve',
        '--http',
        '18931',
      ],
      /http:\/\/127\.0\.0\.1:18931\/mcp/,
    );
    await waitHealthy(18931, `/v2/models/${c.name}/ready`);
    const inputName = c.key === 'tabular' ? 'features' : 'image';
    const oipHeader = Buffer.from(
      JSON.stringify({
        inputs: [{ name: inputName, shape: c.shape, datatype: 'FP32', parameters: { binary_data_size: bytes.length } }],
      }),
    );
    const oipBody = Buffer.concat([oipHeader, bytes]);
    /** OIP v2 with binary tensor data: the same request to tensorgate and to KServe. */
    const oipCall = (port: number) => async () =>
      httpCall(
        port,
        `/v2/models/${c.name}/infer`,
        { 'content-type': 'application/octet-stream', 'inference-header-content-length': oipHeader.length },
        oipBody,
      );
    for (const concurrency of levels) {
      const b64 = { b64: bytes.toString('base64'), shape: c.shape, dtype: 'float32' };
      record(
        'tensorgate-mcp',
        c.key,
        concurrency,
        await closedLoop(
          () => mcpCall('http://127.0.0.1:18931/mcp', 'infer', { model: c.name, inputs: { [inputName]: b64 } }),
          concurrency,
          ms,
        ),
      );
      record('tensorgate-oip', c.key, concurrency, await closedLoop(oipCall(18931), concurrency, ms));
    }
    await stop(server);

    // KServe's model server, OIP v2 with the same binary request (no batching: it has none built in)
    const kserve = await start(
      PEERS_PYTHON,
      [join(ROOT, 'bench/oip/kserve_server.py'), '--model-dir', c.dir, '--port', '18934'],
      /./,
    );
    await waitHealthy(18934, `/v2/models/${c.name}/ready`);
    for (const concurrency of levels)
      record('kserve', c.key, concurrency, await closedLoop(oipCall(18934), concurrency, ms));
    await stop(kserve);

    // The user report's setup: FastMCP, JSON lists
    const list = await start(
      PEERS_PYTHON,
      [join(ROOT, 'bench/peers/mcp_list_server.py'), '--model-dir', c.dir, '--port', '18932'],
      /Uvicorn running/,
    );
    const inputs = nested(data, c.shape);
    for (const concurrency of levels)
      record(
        'mcp-list',
        c.key,
        concurrency,
        await closedLoop(() => mcpCall('http://127.0.0.1:18932/mcp', 'predict', { inputs }), concurrency, ms),
      );
    await stop(list);

    // LitServe, batching on
    const lit = await start(
      PEERS_PYTHON,
      [join(ROOT, 'bench/peers/litserve_server.py'), '--model-dir', c.dir, '--port', '18933'],
      /Uvicorn running|Application startup complete/,
    );
    await waitHealthy(18933, '/health');
    const litBody = Buffer.from(JSON.stringify({ inputs }));
    for (const concurrency of levels)
      record(
        'litserve',
        c.key,
        concurrency,
        await closedLoop(
          async () => httpCall(18933, '/predict', { 'content-type': 'application/json' }, litBody),
          concurrency,
          ms,
        ),
      );
    await stop(lit);
  }
  rmSync(work, { recursive: true, force: true });

  const result: PeersResult = {
    benchmark: 'peers',
    date: new Date().toISOString(),
    machine: machineInfo(ROOT),
    config: { models, concurrency: levels, seconds: Number(opts.seconds), warmup_ms: WARMUP_MS, batching: BATCHING },
    blocks,
  };
  const out =
    opts.out ?? join(ROOT, 'bench', 'results', `peers-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`wrote ${out}\n`);
}

/** Polls a GET route until it answers 200 (LitServe binds its port after its workers start). */
async function waitHealthy(port: number, path: string): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const ok = await fetch(`http://127.0.0.1:${port}${path}`)
      .then((r) => r.status === 200)
      .catch(() => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`nothing answered ${path} on port ${port}`);
}

main().catch(async (err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  await Promise.all([...running].map(stop));
  process.exit(1);
});
