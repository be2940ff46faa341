/**
 * bench/large-body: what an OIP v2 binary call costs the gateway when the tensor is image-sized
 * (1x3x224x224 fp32, 602 KB) and the forward pass next to nothing, so that moving the body is what
 * is measured: reading it off the socket, into the worker's shared memory, and, for a large
 * answer, back out (docs/architecture.md, "Large bodies").
 *
 *   node --import tsx bench/large-body/run.ts [--calls 600] [--rounds 3] [--concurrency 8]
 *        [--wide 32] [--data-threads 2] [--out FILE] [--label TEXT] [--server-root DIR]
 *
 * Models (bench/large-body/make_models.py): `channel-mean` (602 KB in, 12 bytes out) and `half`
 * (602 KB in and out). Over MCP Streamable HTTP, `channel-mean` is also called as an agent would:
 * the tensor inline as base64 (`mcp-http-b64`), or as the path of a `.npy` file
 * (`mcp-http-path`). Two gateways serve them: as shipped, and with `TENSORGATE_V8_HEAP=default`
 * (V8's default accounting of external memory, under which dead socket reads bring on full
 * collections). Per gateway: `channel-mean` with one client and with `--concurrency` clients in a
 * closed loop, and `half` with one client; every scenario in every round, interleaved so that
 * drift of the machine hits all alike. The shipped gateway also serves `channel-mean-batched`
 * (batches of up to 32, 2 ms delay) to `--wide` clients, as the GPU benchmark's concurrency-32
 * figures do: the tensor in the body (`batched-binary`), in a system shared-memory region
 * (`batched-shm`), and as a `.npy` path over MCP Streamable HTTP, a session per client
 * (`batched-mcp-path`). `half-shm` is `half` to one client through system shared-memory regions
 * both ways (the worker reads the input and writes the output there itself). With
 * `--data-threads N` (default 2; 0 for a build without one) the shipped gateway also serves the
 * OIP data plane (`--oip-port`) from N threads, and `channel-mean-dataplane/c1` and
 * `batched-binary-dataplane/c<wide>` send the binary calls there. Besides the gateway's CPU per call, its main thread's: the JavaScript thread
 * every request passes through, whose CPU per call bounds one gateway's calls per second. The gateways' garbage collection over each scenario comes
 * from their /metrics (`nodejs_gc_duration_seconds`). The baseline is each model's raw forward in one Python
 * process on the same input (bench/mcp-overhead/baseline.py). `--server-root` serves from another
 * checkout (an earlier commit, built), to compare against it; `--label` says what that was.
 * Results go to bench/results/large-body-<time>.json; `node --import tsx bench/report.ts` renders them.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { encodeNpy } from '../../src/tensor/npy.js';
import { cpuMs, threadCpuMs } from '../cpu.js';
import { BaselineProcess, McpConnection } from '../mcp-overhead/clients.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, round } from '../mcp-overhead/stats.js';
import { binaryRequest, post, postForHeader, sharedMemoryRequests } from '../oip/requests.js';
import { startTensorgate, stopAll, stopProcess } from '../peers/harness.js';
import type { LargeBodyResult, LargeBodyScenario } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SHAPE = [1, 3, 224, 224];
const ELEMENTS = SHAPE.reduce((a, b) => a * b, 1);

const { values: opts } = parseArgs({
  options: {
    calls: { type: 'string', default: '600' },
    rounds: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '50' },
    concurrency: { type: 'string', default: '8' },
    wide: { type: 'string', default: '32' },
    out: { type: 'string' },
    label: { type: 'string' },
    'server-root': { type: 'string' },
    'data-threads': { type: 'string', default: '2' },
  },
});
const calls = Number(opts.calls);
const rounds = Number(opts.rounds);
const warmup = Number(opts.warmup);
const concurrency = Number(opts.concurrency);
const wide = Number(opts.wide);
const serverRoot = resolve(opts['server-root'] ?? ROOT);
/** Threads of the shipped gateway's OIP data plane (--oip-port); 0: none (a build without one). */
const dataThreads = Number(opts['data-threads']);

const MODELS = {
  'channel-mean': { output: 'means', outputBytes: 3 * 4 },
  half: { output: 'halved', outputBytes: ELEMENTS * 4 },
  'channel-mean-batched': { output: 'means', outputBytes: 3 * 4 },
} as const;
type ModelName = keyof typeof MODELS;
/** The models with a raw baseline: the batched copy runs channel-mean's forward. */
const BASELINE_MODELS = ['channel-mean', 'half'] as const;

interface Gateway {
  name: string;
  base: string;
  /** The OIP data plane's base URL, where the gateway serves one. */
  dataPlane?: string;
  pid: number;
  mcp: McpConnection;
}

/**
 * The gateway's garbage collection so far, from its /metrics (`nodejs_gc_duration_seconds`): all
 * time in ms, and the count of full (major) collections; undefined from a server without them.
 */
async function collections(g: Gateway): Promise<{ ms: number; major: number } | undefined> {
  const text = await (await fetch(`${g.base}/metrics`)).text();
  if (!text.includes('# TYPE nodejs_gc_duration_seconds histogram')) return undefined;
  let seconds = 0;
  let major = 0; // a kind is listed once it has happened
  for (const m of text.matchAll(/^nodejs_gc_duration_seconds_(sum|count)\{kind="(\w+)"\} (\S+)$/gm)) {
    if (m[1] === 'sum') seconds += Number(m[3]);
    else if (m[2] === 'major') major = Number(m[3]);
  }
  return { ms: seconds * 1000, major };
}

interface Scenario {
  /** `<model>/c<concurrency>` over OIP binary, `mcp-http-<form>/c1` over MCP, `batched-<form>/c<wide>`. */
  name: string;
  gateway: Gateway;
  model: ModelName;
  concurrency: number;
  /** One call by client number `client` (each shared-memory client has its own output region). */
  call: (client: number) => Promise<unknown>;
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'tg-bench-large-'));
  const repo = join(work, 'models');
  process.stderr.write('building the models...\n');
  execFileSync(pythonExecutable(), [join(ROOT, 'bench/large-body/make_models.py'), repo], { stdio: 'inherit' });
  const input = new Float32Array(ELEMENTS).map((_, i) => ((i * 7919) % 1000) / 1000);
  const npy = join(work, 'image.npy');
  writeFileSync(npy, encodeNpy({ dtype: 'float32', shape: SHAPE, data: new Uint8Array(input.buffer) }));

  process.stderr.write('starting the gateways and the baselines...\n');
  const gateways: Gateway[] = [];
  const children = [];
  for (const [name, env] of [
    ['shipped', {}],
    ['v8-default', { TENSORGATE_V8_HEAP: 'default' }],
  ] as const) {
    const dir = join(work, name);
    mkdirSync(dir);
    const withDataPlane = name === 'shipped' && dataThreads > 0;
    const started = await startTensorgate(
      serverRoot,
      repo,
      dir,
      withDataPlane ? /at (http:\/\/[\d.]+:\d+)\/mcp.*data plane at (http:\/\/[\d.]+:\d+)\/v2/ : undefined,
      ['--allow-root', work],
      { ...process.env, ...env },
      withDataPlane ? ['--oip-port', '0', '--oip-threads', String(dataThreads)] : [],
    );
    children.push(started.child);
    gateways.push({
      name,
      base: started.base,
      ...(withDataPlane ? { dataPlane: started.match[2] as string } : {}),
      pid: started.child.pid as number,
      mcp: await McpConnection.attach(`${started.base}/mcp`),
    });
  }
  const baselines = Object.fromEntries(
    BASELINE_MODELS.map((m) => [m, new BaselineProcess(pythonExecutable(), join(repo, m), npy, 50)]),
  ) as Record<(typeof BASELINE_MODELS)[number], BaselineProcess>;
  const baselineInfo = await baselines['channel-mean'].ready;
  await baselines.half.ready;

  const bodies = Object.fromEntries(
    (Object.keys(MODELS) as ModelName[]).map((m) => [
      m,
      binaryRequest(
        { input: 'image', output: MODELS[m].output, shape: SHAPE, outputBytes: MODELS[m].outputBytes },
        input,
      ),
    ]),
  ) as Record<ModelName, ReturnType<typeof binaryRequest>>;
  const oip = (
    gateway: Gateway,
    model: ModelName,
    clients: number,
    name = `${model}/c${clients}`,
    base = gateway.base,
  ): Scenario => ({
    name,
    gateway,
    model,
    concurrency: clients,
    call: () => postForHeader(base, `/v2/models/${model}/infer`, bodies[model]),
  });
  const [shipped] = gateways as [Gateway];
  const shm = await sharedMemoryRequests(
    shipped.base,
    'large',
    { input: 'image', output: 'means', shape: SHAPE, outputBytes: MODELS['channel-mean-batched'].outputBytes },
    input,
    wide,
  );
  // `half` to one client through regions both ways: 602 KB in, 602 KB out, no body.
  const halfShm = await sharedMemoryRequests(
    shipped.base,
    'halfshm',
    { input: 'image', output: MODELS.half.output, shape: SHAPE, outputBytes: MODELS.half.outputBytes },
    input,
    1,
  );
  process.once('exit', () => {
    // the regions' files, however the run ends
    shm.cleanup();
    halfShm.cleanup();
  });
  // Over MCP Streamable HTTP by path, as agents call it: one session per client.
  const sessions = await Promise.all(Array.from({ length: wide }, () => McpConnection.attach(`${shipped.base}/mcp`)));
  const batchedMcpPath: Scenario = {
    name: `batched-mcp-path/c${wide}`,
    gateway: shipped,
    model: 'channel-mean-batched',
    concurrency: wide,
    call: (client) =>
      (sessions[client] as McpConnection).callTool('infer', {
        model: 'channel-mean-batched',
        inputs: { image: { path: npy } },
      }),
  };
  const batchedShm: Scenario = {
    name: `batched-shm/c${wide}`,
    gateway: shipped,
    model: 'channel-mean-batched',
    concurrency: wide,
    call: (client) => post(shipped.base, '/v2/models/channel-mean-batched/infer', shm.requests[client] as never),
  };
  const halfInShm: Scenario = {
    name: 'half-shm/c1',
    gateway: shipped,
    model: 'half',
    concurrency: 1,
    call: () => post(shipped.base, '/v2/models/half/infer', halfShm.requests[0] as never),
  };
  // What an agent sends over MCP: the tensor inline as base64, or the path of a .npy file.
  const b64 = Buffer.from(input.buffer).toString('base64');
  const mcp = (gateway: Gateway, form: string, image: Record<string, unknown>): Scenario => ({
    name: `mcp-http-${form}/c1`,
    gateway,
    model: 'channel-mean',
    concurrency: 1,
    call: () => gateway.mcp.callTool('infer', { model: 'channel-mean', inputs: { image } }),
  });
  const scenarios: Scenario[] = gateways.flatMap((gateway) => [
    oip(gateway, 'channel-mean', 1),
    oip(gateway, 'channel-mean', concurrency),
    oip(gateway, 'half', 1),
    mcp(gateway, 'b64', { b64, shape: SHAPE, dtype: 'float32' }),
    mcp(gateway, 'path', { path: npy }),
    ...(gateway === shipped
      ? [halfInShm, oip(gateway, 'channel-mean-batched', wide, `batched-binary/c${wide}`), batchedShm, batchedMcpPath]
      : []),
    // The same binary calls to the OIP data plane's port, whose threads read the bodies.
    ...(gateway.dataPlane
      ? [
          oip(gateway, 'channel-mean', 1, 'channel-mean-dataplane/c1', gateway.dataPlane),
          oip(gateway, 'channel-mean-batched', wide, `batched-binary-dataplane/c${wide}`, gateway.dataPlane),
        ]
      : []),
  ]);
  const key = (s: Scenario) => `${s.gateway.name} ${s.name}`;
  interface Measured {
    ms: number[];
    seconds: number;
    gateway: number;
    main: number;
    worker: number;
    gc?: { ms: number; major: number };
  }
  const samples = new Map<string, Measured>();
  for (const s of scenarios) for (let i = 0; i < warmup; i++) await s.call(0);
  const raw = new Map<ModelName, number[]>();
  const started = performance.now();
  for (let r = 0; r < rounds; r++) {
    process.stderr.write(`round ${r + 1}/${rounds}\n`);
    for (const m of BASELINE_MODELS)
      raw.set(m, [...(raw.get(m) ?? []), ...(await baselines[m].run(calls)).map((s) => s.ms)]);
    for (const s of scenarios) {
      const into: Measured = samples.get(key(s)) ?? { ms: [], seconds: 0, gateway: 0, main: 0, worker: 0 };
      const gcBefore = await collections(s.gateway);
      const before = cpuMs(s.gateway.pid);
      const mainBefore = threadCpuMs(s.gateway.pid);
      const t0 = performance.now();
      const perClient = Math.ceil(calls / s.concurrency);
      await Promise.all(
        Array.from({ length: s.concurrency }, async (_, client) => {
          for (let i = 0; i < perClient; i++) {
            const t = performance.now();
            await s.call(client);
            into.ms.push(performance.now() - t);
          }
        }),
      );
      into.seconds += (performance.now() - t0) / 1000;
      const after = cpuMs(s.gateway.pid);
      const gcAfter = await collections(s.gateway);
      into.gateway += after.self - before.self;
      into.main += threadCpuMs(s.gateway.pid) - mainBefore;
      into.worker += after.children - before.children;
      if (gcBefore && gcAfter)
        into.gc = {
          ms: (into.gc?.ms ?? 0) + gcAfter.ms - gcBefore.ms,
          major: (into.gc?.major ?? 0) + gcAfter.major - gcBefore.major,
        };
      samples.set(key(s), into);
    }
  }
  const seconds = (performance.now() - started) / 1000;

  const results: LargeBodyScenario[] = scenarios.map((s) => {
    const m = samples.get(key(s)) as Measured;
    return {
      name: s.name,
      gateway: s.gateway.name,
      model: s.model,
      concurrency: s.concurrency,
      latency: distribution(m.ms),
      calls_per_s: round(m.ms.length / m.seconds, 1),
      cpu_ms_per_call: {
        gateway: round(m.gateway / m.ms.length),
        gateway_main: round(m.main / m.ms.length),
        worker: round(m.worker / m.ms.length),
      },
      ...(m.gc
        ? {
            gc: {
              ms_per_call: round(m.gc.ms / m.ms.length),
              major_per_1000_calls: round((m.gc.major * 1000) / m.ms.length, 1),
            },
          }
        : {}),
    };
  });
  const result: LargeBodyResult = {
    benchmark: 'large-body',
    date: new Date().toISOString(),
    profiled: false,
    machine: machineInfo(ROOT, { python: baselineInfo.python, torch: baselineInfo.torch }),
    config: {
      calls,
      rounds,
      warmup,
      wide,
      data_threads: dataThreads,
      input_bytes: input.byteLength,
      seconds: round(seconds, 1),
      ...(opts.label ? { label: opts.label } : {}),
    },
    raw: Object.fromEntries([...raw].map(([m, ms]) => [m, distribution(ms)])),
    scenarios: results,
  };
  for (const [m, d] of Object.entries(result.raw)) console.log(`raw ${m.padEnd(22)} p50 ${d.p50.toFixed(3)} ms`);
  for (const r of results)
    console.log(
      `${r.gateway.padEnd(10)} ${r.name.padEnd(16)} p50 ${r.latency.p50.toFixed(3)} ms  p99 ${r.latency.p99.toFixed(3)}  ${r.calls_per_s} calls/s  CPU gateway ${r.cpu_ms_per_call.gateway} (main ${r.cpu_ms_per_call.gateway_main}) worker ${r.cpu_ms_per_call.worker} ms/call${r.gc ? `  GC ${r.gc.ms_per_call} ms/call, ${r.gc.major_per_1000_calls} full per 1000 calls` : ''}`,
    );

  const out =
    opts.out ?? join(ROOT, 'bench', 'results', `large-body-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  process.stderr.write(`wrote ${out}\n`);
  await Promise.all([
    ...Object.values(baselines).map((b) => b.close()),
    ...gateways.map((g) => g.mcp.close()),
    ...sessions.map((m) => m.close()),
  ]);
  await Promise.all(children.map((c) => stopProcess(c)));
}

main().catch(async (err: unknown) => {
  console.error(err);
  await stopAll();
  process.exit(1);
});
