/**
 * bench/fixed-cost: what one call costs beyond the forward pass when the model is tiny, so that
 * the fixed cost per call is all there is to see.
 *
 *   node --import tsx bench/fixed-cost/run.ts [--calls 1000] [--rounds 5] [--spin-us 2000] [--out FILE]
 *        [--label TEXT]   (what was measured, when not this checkout as it is)
 *
 * The demo tabular model (version 1, `.pt2`, one row of 4 floats) is served twice by the same
 * gateways: as `tabular-classifier` with the default channel (no spin on the CPU) and as
 * `tabular-spin` with `resources.spin_us` set, so that the worker polls its control channel after
 * answering instead of sleeping (docs/worker-protocol.md#spinning). One client, sequential calls,
 * every scenario interleaved in rounds so that drift of the machine hits all alike:
 *
 * - `raw`: the forward pass in one Python process (bench/mcp-overhead/baseline.py), the baseline;
 * - `raw/direct`: the same forward called as tensorgate's worker calls it (the structure check done
 *   once, the graph called without the module around it: python/tensorgate/_direct.py), for
 *   reference;
 * - `oip/binary`: OIP v2 REST with binary tensor data in and out (`tensorgate serve --http`);
 * - `stdio/path`: the MCP `infer` tool over stdio, input as a `.npy` path (`tensorgate serve --stdio`);
 * - `stdio/list_models`: tensorgate's cheapest tool call over the same stdio pipe: the protocol floor;
 * - `http/path`, `http/list_models`: `infer` by path and `list_models` over MCP Streamable HTTP
 *   (`serve --http`) as the client speaks it by default (a session); `http-2026/path` in the
 *   2026-07-28 revision (no session, a server built per request);
 * - `sdk-echo/path`: the MCP TypeScript SDK alone (McpServer over its stdio transport, a no-op
 *   `infer` tool) carrying the same arguments;
 * - `echo/path`: a bare newline-delimited JSON-RPC echo over a pipe, no SDK at all;
 * - `oip/binary@placed`, `stdio/path@placed`, `raw@placed`: the same with the worker on a CPU of
 *   its own (`resources.cpus`), the gateway and this client on another (placement.ts), and the raw
 *   baseline on the worker's CPU; left out where CPUs cannot be placed (fewer than 2, no taskset);
 * - `floor/http`, `floor/hop`, `floor/hop+spin`: the architecture floor for `oip/binary`
 *   (hop-server.ts): a bare node:http server answering the same request with an answer of the
 *   same size, at once or after one round trip to a Python process over a socket pair, framed and
 *   answered as a worker does (tensorgate's own channel, spinning or not), with no model.
 *
 * Per scenario it reports the latency and, for the tensorgate ones, the CPU time per call of the
 * gateway and of the model's worker (from /proc), which is what the spin costs.
 * Results go to bench/results/fixed-cost-<time>.json; `node --import tsx bench/report.ts` renders them.
 */
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import type { StageTimings } from '../../src/gateway.js';
import { cpuMs } from '../cpu.js';
import { BaselineProcess, EchoConnection, McpConnection } from '../mcp-overhead/clients.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, median, medianPerKey, round } from '../mcp-overhead/stats.js';
import { binaryRequest, postForHeader } from '../oip/requests.js';
import { startProcess, startTensorgate, stopAll, stopProcess } from '../peers/harness.js';
import { fixedCostModels, INPUT, MODEL, SPIN_MODEL } from './models.js';
import { findPlacement, type Placement, pin, placedRepo } from './placement.js';
import type { FixedCostResult, ScenarioResult } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
/** The issue's targets: over the raw forward, in ms. */
const OIP_TARGET_MS = 0.25;
const STDIO_TARGET_MS = 0.25;

const { values: opts } = parseArgs({
  options: {
    calls: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '100' },
    'spin-us': { type: 'string', default: '2000' },
    out: { type: 'string' },
    label: { type: 'string' },
  },
});
const calls = Number(opts.calls);
const rounds = Number(opts.rounds);
const warmup = Number(opts.warmup);
const spinUs = Number(opts['spin-us']);

interface Scenario {
  name: string;
  what: string;
  /** One call; resolves with the server's stage timings where the answer carries them. */
  call: () => Promise<StageTimings | undefined>;
  /** The process whose CPU (and its children's) a call of this scenario costs. */
  pid?: number;
  /** Set for the placed scenarios: this client runs on the gateway's CPU while it calls them. */
  placed?: Placement;
}

/** The stage timings an OIP answer carries in its parameters. */
function stageTimings(p: Record<string, number>): StageTimings {
  return {
    decode_ms: p.decode_ms ?? 0,
    queue_ms: p.queue_ms ?? 0,
    transfer_ms: p.transfer_ms ?? 0,
    compute_ms: p.compute_ms ?? 0,
    encode_ms: p.encode_ms ?? 0,
    total_ms: p.total_ms ?? 0,
  };
}

/**
 * The placed gateways (HTTP and stdio) over a repository of the shipped model placed by
 * `resources.cpus`, pinned to the gateway's CPU, and the raw baseline pinned to the worker's; none
 * where this machine cannot place (the reason is printed).
 */
async function startPlaced(work: string, npy: string, plainDir: string) {
  const placement = findPlacement();
  if (typeof placement === 'string') {
    process.stderr.write(`no placed scenarios: ${placement}\n`);
    return { why: placement, close: async () => {} };
  }
  const dir = join(work, 'placed');
  mkdirSync(dir);
  const repo = placedRepo(plainDir, join(dir, 'models'), placement.worker);
  const http = await startTensorgate(ROOT, repo, dir, /ready: .* at (http:\/\/[\d.]+:\d+)\/mcp/, [
    '--allow-root',
    work,
  ]);
  const stdio = await McpConnection.open('stdio', { root: ROOT, models: repo, workDir: dir });
  await stdio.waitReady(MODEL);
  const baseline = new BaselineProcess(pythonExecutable(), plainDir, npy, 200);
  await baseline.ready;
  for (const pid of [http.child.pid, stdio.pid]) pin(pid as number, placement.gateway);
  pin(baseline.pid as number, placement.worker);
  // The stdio server's allowed root is its work folder: the input is copied there.
  const placedNpy = join(dir, 'row.npy');
  copyFileSync(npy, placedNpy);
  return {
    placement,
    base: http.base,
    httpPid: http.child.pid,
    stdio,
    baseline,
    npy: placedNpy,
    close: async () => {
      await Promise.all([stdio.close(), baseline.close()]);
      await stopProcess(http.child);
    },
  };
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'tg-bench-fixed-'));
  const { repo: models, plainDir, npy } = fixedCostModels(ROOT, work, spinUs);

  process.stderr.write('starting the servers and the baseline...\n');
  const http = await startTensorgate(ROOT, models, work, /ready: .* at (http:\/\/[\d.]+:\d+)\/mcp/, [
    '--allow-root',
    work,
  ]);
  const mcpHttp = await McpConnection.attach(`${http.base}/mcp`);
  const mcpHttp2026 = await McpConnection.attach(`${http.base}/mcp`, '2026-07-28');
  const stdio = await McpConnection.open('stdio', { root: ROOT, models, workDir: work });
  await stdio.waitReady(SPIN_MODEL);
  const sdkEcho = await McpConnection.openSdkEcho();
  const echo = new EchoConnection();
  const floor = await startProcess(
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'bench/fixed-cost/hop-server.ts'), pythonExecutable(), String(spinUs)],
    ROOT,
    /(http:\/\/[\d.]+:\d+)/,
  );
  const floorBase = floor.match[1] as string;
  const baseline = new BaselineProcess(pythonExecutable(), plainDir, npy, 200);
  const direct = new BaselineProcess(pythonExecutable(), plainDir, npy, 200, ['--direct']);
  const [baselineInfo, directInfo] = await Promise.all([baseline.ready, direct.ready]);
  const baselines = [
    { name: 'raw', process: baseline },
    ...(directInfo.direct ? [{ name: 'raw/direct', process: direct }] : []),
  ];
  const placed = await startPlaced(work, npy, plainDir);
  if (placed.baseline) baselines.push({ name: 'raw@placed', process: placed.baseline });

  const body = binaryRequest({ input: 'features', output: 'probabilities', shape: [1, 4], outputBytes: 12 }, INPUT);
  const oip =
    (model: string, base = http.base) =>
    async () => {
      const header = await postForHeader(base, `/v2/models/${model}/infer`, body);
      return stageTimings(header.parameters as Record<string, number>);
    };
  const bare = (path: string) => async () => {
    await postForHeader(floorBase, path, body);
    return undefined;
  };
  const mcp = (conn: McpConnection, tool: string, args: Record<string, unknown>) => async () =>
    (await conn.callTool(tool, args)).timings;
  const infer = (model: string) => ({ model, inputs: { features: { path: npy } } });
  const scenarios: Scenario[] = [
    { name: 'oip/binary', what: 'OIP v2 REST, binary tensor data in and out', call: oip(MODEL), pid: http.child.pid },
    {
      name: 'oip/binary+spin',
      what: `the same, worker spinning ${spinUs} µs`,
      call: oip(SPIN_MODEL),
      pid: http.child.pid,
    },
    {
      name: 'stdio/path',
      what: 'MCP `infer` over stdio, input by `.npy` path',
      call: mcp(stdio, 'infer', infer(MODEL)),
      pid: stdio.pid,
    },
    {
      name: 'stdio/path+spin',
      what: `the same, worker spinning ${spinUs} µs`,
      call: mcp(stdio, 'infer', infer(SPIN_MODEL)),
      pid: stdio.pid,
    },
    {
      name: 'http/path',
      what: 'MCP `infer` over Streamable HTTP, input by `.npy` path',
      call: mcp(mcpHttp, 'infer', infer(MODEL)),
      pid: http.child.pid,
    },
    {
      name: 'http-2026/path',
      what: 'the same in the 2026-07-28 revision: no session, a server per request',
      call: mcp(mcpHttp2026, 'infer', infer(MODEL)),
      pid: http.child.pid,
    },
    {
      name: 'http/list_models',
      what: "tensorgate's cheapest tool over Streamable HTTP",
      call: mcp(mcpHttp, 'list_models', {}),
      pid: http.child.pid,
    },
    {
      name: 'stdio/list_models',
      what: "tensorgate's cheapest tool over the same pipe (the protocol floor)",
      call: mcp(stdio, 'list_models', {}),
      pid: stdio.pid,
    },
    {
      name: 'sdk-echo/path',
      what: 'MCP TypeScript SDK alone: McpServer + stdio, a no-op `infer` tool, same arguments',
      call: mcp(sdkEcho, 'infer', infer(MODEL)),
    },
    {
      name: 'echo/path',
      what: 'bare newline-delimited JSON-RPC echo over a pipe, same arguments, no SDK',
      call: async () => {
        await echo.call(infer(MODEL));
        return undefined;
      },
    },
    ...(placed.placement
      ? [
          {
            name: 'oip/binary@placed',
            what: `\`oip/binary\` with the worker on CPU ${placed.placement.worker} (\`resources.cpus\`), the gateway and this client on CPU ${placed.placement.gateway}`,
            call: oip(MODEL, placed.base),
            pid: placed.httpPid,
            placed: placed.placement,
          },
          {
            name: 'stdio/path@placed',
            what: `\`stdio/path\` placed the same way`,
            call: mcp(placed.stdio as McpConnection, 'infer', {
              model: MODEL,
              inputs: { features: { path: placed.npy } },
            }),
            pid: placed.stdio?.pid,
            placed: placed.placement,
          },
        ]
      : []),
    {
      name: 'floor/http',
      what: 'bare node:http server, the same request and an answer of the same size: the HTTP floor',
      call: bare('/echo'),
      pid: floor.child.pid,
    },
    {
      name: 'floor/hop',
      what: "the same server after one round trip to a Python process over a socket pair, framed as tensorgate's worker channel, no model: the architecture floor",
      call: bare('/hop'),
      pid: floor.child.pid,
    },
    {
      name: 'floor/hop+spin',
      what: `the same, the Python side spinning ${spinUs} µs`,
      call: bare('/hop-spin'),
      pid: floor.child.pid,
    },
  ];

  const latencies = new Map<string, number[]>(baselines.map((b) => [b.name, []]));
  const stages = new Map<string, StageTimings[]>();
  const cpu = new Map<string, { gateway: number; worker: number; calls: number }>();
  for (const s of scenarios) {
    latencies.set(s.name, []);
    stages.set(s.name, []);
    if (s.placed) pin(process.pid, s.placed.gateway);
    for (let i = 0; i < warmup; i++) await s.call();
    if (s.placed) pin(process.pid, s.placed.own);
  }
  for (const b of baselines) await b.process.run(warmup);
  const started = performance.now();
  for (let r = 0; r < rounds; r++) {
    process.stderr.write(`round ${r + 1}/${rounds}\n`);
    for (const b of baselines)
      (latencies.get(b.name) as number[]).push(...(await b.process.run(calls)).map((s) => s.ms));
    for (const s of scenarios) {
      const before = s.pid ? cpuMs(s.pid) : undefined;
      const into = latencies.get(s.name) as number[];
      if (s.placed) pin(process.pid, s.placed.gateway);
      for (let i = 0; i < calls; i++) {
        const t0 = performance.now();
        const timings = await s.call();
        into.push(performance.now() - t0);
        if (timings) stages.get(s.name)?.push(timings);
      }
      if (s.placed) pin(process.pid, s.placed.own);
      if (s.pid && before) {
        const after = cpuMs(s.pid);
        const c = cpu.get(s.name) ?? { gateway: 0, worker: 0, calls: 0 };
        c.gateway += after.self - before.self;
        c.worker += after.children - before.children;
        c.calls += calls;
        cpu.set(s.name, c);
      }
    }
  }
  const seconds = (performance.now() - started) / 1000;

  const raw = distribution(latencies.get('raw') as number[]);
  const results: ScenarioResult[] = [
    { name: 'raw', what: 'forward pass in one Python process (the baseline)', latency: raw },
  ];
  if (latencies.has('raw/direct')) {
    const latency = distribution(latencies.get('raw/direct') as number[]);
    results.push({
      name: 'raw/direct',
      what: "the same forward called as the worker calls it: the exported module's structure check done once, the graph called directly",
      latency,
      over_raw_ms: round(latency.p50 - raw.p50),
    });
  }
  if (latencies.has('raw@placed') && placed.placement) {
    const latency = distribution(latencies.get('raw@placed') as number[]);
    results.push({
      name: 'raw@placed',
      what: `\`raw\` on CPU ${placed.placement.worker}, where the placed worker runs`,
      latency,
      over_raw_ms: round(latency.p50 - raw.p50),
    });
  }
  for (const s of scenarios) {
    const latency = distribution(latencies.get(s.name) as number[]);
    const c = cpu.get(s.name);
    const timings = stages.get(s.name) ?? [];
    results.push({
      name: s.name,
      what: s.what,
      latency,
      over_raw_ms: round(latency.p50 - raw.p50),
      ...(timings.length > 0 ? { server_ms: medianPerKey(timings as unknown as Record<string, number>[]) } : {}),
      ...(c ? { cpu_ms_per_call: { gateway: round(c.gateway / c.calls), worker: round(c.worker / c.calls) } } : {}),
    });
  }
  const p50 = (name: string) => (results.find((r) => r.name === name) as ScenarioResult).latency.p50;
  const protocolFloor = p50('stdio/list_models');
  const targets = ['', '+spin'].flatMap((suffix) => [
    {
      target: `oip/binary${suffix}`,
      goal: `p50 <= raw + ${OIP_TARGET_MS} ms`,
      measured_over_raw_ms: round(p50(`oip/binary${suffix}`) - raw.p50),
      allowed_ms: OIP_TARGET_MS,
      met: p50(`oip/binary${suffix}`) - raw.p50 <= OIP_TARGET_MS,
    },
    {
      target: `stdio/path${suffix}`,
      goal: `p50 <= raw + list_models floor + ${STDIO_TARGET_MS} ms`,
      measured_over_raw_ms: round(p50(`stdio/path${suffix}`) - raw.p50),
      allowed_ms: round(protocolFloor + STDIO_TARGET_MS),
      met: p50(`stdio/path${suffix}`) - raw.p50 <= protocolFloor + STDIO_TARGET_MS,
    },
  ]);

  const result: FixedCostResult = {
    benchmark: 'fixed-cost',
    date: new Date().toISOString(),
    profiled: false,
    machine: machineInfo(ROOT, { python: baselineInfo.python, torch: baselineInfo.torch }),
    config: {
      model: MODEL,
      format: baselineInfo.file,
      calls,
      rounds,
      warmup,
      spin_us: spinUs,
      seconds: round(seconds, 1),
      ...(opts.label ? { label: opts.label } : {}),
      placement: placed.placement
        ? { gateway: placed.placement.gateway, worker: placed.placement.worker }
        : { none: placed.why ?? '' },
    },
    scenarios: results,
    targets,
    median_raw_ms: round(median(latencies.get('raw') as number[])),
  };
  for (const r of results)
    console.log(
      `${r.name.padEnd(20)} p50 ${r.latency.p50.toFixed(3)} ms  p99 ${r.latency.p99.toFixed(3)}${r.over_raw_ms !== undefined ? `  +${r.over_raw_ms.toFixed(3)} over raw` : ''}${r.cpu_ms_per_call ? `  CPU gateway ${r.cpu_ms_per_call.gateway} worker ${r.cpu_ms_per_call.worker} ms/call` : ''}`,
    );
  for (const t of targets)
    console.log(
      `${t.target}: ${t.goal}: +${t.measured_over_raw_ms} ms (allowed ${t.allowed_ms}) ${t.met ? 'met' : 'NOT met'}`,
    );

  const out =
    opts.out ?? join(ROOT, 'bench', 'results', `fixed-cost-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  process.stderr.write(`wrote ${out}\n`);

  await Promise.all([
    placed.close(),
    stdio.close(),
    mcpHttp.close(),
    mcpHttp2026.close(),
    sdkEcho.close(),
    echo.close(),
    baseline.close(),
    direct.close(),
  ]);
  await Promise.all([stopProcess(http.child), stopProcess(floor.child)]);
}

main().catch(async (err: unknown) => {
  console.error(err);
  await stopAll();
  process.exit(1);
});
