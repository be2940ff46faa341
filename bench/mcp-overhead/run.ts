/**
 * bench/mcp-overhead: what an MCP `infer` call costs on top of the model's own forward pass.
 *
 *   node --import tsx bench/mcp-overhead/run.ts [--iterations 100] [--array-iterations 30]
 *        [--rounds 5] [--models DIR] [--scenarios stdio/path,http/b64] [--profile] [--build]
 *
 * Image model, one client, sequential calls, everything in one run: the raw forward in a Python
 * process (baseline.py, the baseline), `infer` over MCP stdio and Streamable HTTP with the input
 * as a .npy path, as b64 and as a JSON array, a no-op tool call and an MCP ping on both
 * transports, and a bare newline-delimited JSON-RPC echo (echo-server.mjs) carrying the same
 * base64 payload. Scenarios run interleaved in rounds so that drift of the machine hits all alike.
 * Results go to bench/results/mcp-overhead-<time>.json; `node --import tsx bench/report.ts`
 * turns them into docs/benchmarks.md. With --profile the servers run under --cpu-prof and the
 * samples taken during each scenario's calls are attributed to functions (latencies are then
 * inflated by the profiler and the run is kept out of the headline table).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { BaselineProcess, EchoConnection, McpConnection, type Sample } from './clients.js';
import { loadProfile, nowUs, type ProfileSummary, summarize, type Window } from './cpu-profile.js';
import { makeInput } from './inputs.js';
import { machineInfo } from './machine.js';
import { type Distribution, distribution, median, medianPerKey, round } from './stats.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const MODEL = 'image-classifier';
const SHAPE = [1, 3, 224, 224];
const PATH_TARGET_MS = 1.5;
const B64_ECHO_RATIO_TARGET = 1.25;

const { values: opts } = parseArgs({
  options: {
    iterations: { type: 'string', default: '100' },
    'array-iterations': { type: 'string', default: '30' },
    warmup: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '5' },
    models: { type: 'string' },
    python: { type: 'string', default: process.env.TENSORGATE_PYTHON ?? '/usr/bin/python3' },
    scenarios: { type: 'string' },
    out: { type: 'string' },
    profile: { type: 'boolean', default: false },
    build: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opts.help) {
  process.stdout.write(`${readHeader()}\n`);
  process.exit(0);
}

const iterations = Number(opts.iterations);
const arrayIterations = Math.min(iterations, Number(opts['array-iterations']));
const warmup = Number(opts.warmup);
const rounds = Math.max(1, Number(opts.rounds));

type Form = 'forward' | 'path' | 'b64' | 'array' | 'list_models' | 'ping' | 'b64 (parse only)' | 'b64 + decode';

interface Scenario {
  id: string;
  transport: 'python' | 'stdio' | 'http' | 'echo';
  form: Form;
  iterations: number;
  warmup: number;
  run: (n: number) => Promise<Sample[]>;
  samples: Sample[];
  windows: Window[];
}

export interface ScenarioResult {
  id: string;
  transport: Scenario['transport'];
  form: Form;
  latency: Distribution;
  /** p50 of this scenario minus the baseline's p50. */
  overhead_p50_ms: number;
  /** Median per call of (client time - worker-reported forward time): overhead without forward-pass jitter. */
  paired_overhead_p50_ms?: number;
  /** Median per call of (client time - server-reported total): MCP transport, SDK, client. */
  outside_gateway_ms?: number;
  stages?: Record<string, number>;
  client?: Record<string, number>;
}

function readHeader(): string {
  return 'usage: node --import tsx bench/mcp-overhead/run.ts [--iterations N] [--array-iterations N] [--warmup N]\n' +
    '         [--rounds N] [--models DIR] [--python EXE] [--scenarios id,id] [--out FILE] [--profile] [--build]\n' +
    'Scenario ids: baseline, stdio/path, stdio/b64, stdio/array, stdio/list_models, stdio/ping,\n' +
    '  http/… (same forms), echo/b64, echo/b64+decode.';
}

function log(line: string): void {
  process.stderr.write(`[bench] ${line}\n`);
}

function ensureBuilt(): void {
  const entry = join(ROOT, 'dist', 'cli', 'main.js');
  if (opts.build || !existsSync(entry)) {
    log('building (tsc -p tsconfig.json)');
    execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], {
      cwd: ROOT,
      stdio: 'inherit',
    });
    return;
  }
  const built = statSync(entry).mtimeMs;
  const newest = (dir: string): number =>
    readdirSync(dir, { withFileTypes: true }).reduce((m, e) => {
      const p = join(dir, e.name);
      return Math.max(m, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
    }, 0);
  if (newest(join(ROOT, 'src')) > built) log('warning: src/ is newer than dist/; pass --build to measure the current code');
}

function modelsDir(): string {
  if (opts.models) return resolve(opts.models);
  const local = join(ROOT, 'models');
  if (existsSync(join(local, MODEL, 'config.json'))) return local;
  const built = join(ROOT, '.tensorgate', 'bench-models');
  if (!existsSync(join(built, MODEL, 'config.json'))) {
    log(`building demo models into ${built}`);
    mkdirSync(built, { recursive: true });
    execFileSync(opts.python, [join(ROOT, 'scripts', 'make_demo_models.py'), built], { stdio: 'inherit' });
  }
  return built;
}

async function repeat(n: number, call: () => Promise<Sample>): Promise<Sample[]> {
  const out: Sample[] = [];
  for (let i = 0; i < n; i++) out.push(await call());
  return out;
}

async function main(): Promise<void> {
  ensureBuilt();
  const models = modelsDir();
  const workDir = mkdtempSync(join(tmpdir(), 'tensorgate-bench-'));
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const resultsDir = join(ROOT, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  const profileDir = opts.profile ? join(resultsDir, `profiles-${stamp}`) : undefined;
  const input = makeInput(join(workDir, 'image.npy'), SHAPE);
  log(`models ${models}; input ${input.bytes} bytes, b64 ${input.b64.b64.length} chars; work dir ${workDir}`);

  const t0 = performance.now();
  const baseline = new BaselineProcess(opts.python, join(models, MODEL), input.path, 10);
  const serverOpts = (kind: string) => ({
    root: ROOT,
    models,
    workDir,
    ...(profileDir ? { cpuProfDir: join(profileDir, kind) } : {}),
  });
  const [stdio, http, runtime] = await Promise.all([
    McpConnection.open('stdio', serverOpts('stdio')),
    McpConnection.open('http', serverOpts('http')),
    baseline.ready,
  ]);
  await Promise.all([stdio.waitReady(), http.waitReady()]);
  log(`servers and baseline ready in ${Math.round(performance.now() - t0)} ms (torch ${runtime.torch}, ${runtime.threads} threads)`);
  const echo = new EchoConnection(false);
  const echoDecode = new EchoConnection(true);

  const inferArgs = (image: unknown) => ({ model: MODEL, inputs: { image } });
  const forms: [Form, unknown][] = [
    ['path', { path: input.path }],
    ['b64', input.b64],
    ['array', input.array],
  ];
  const scenarios: Scenario[] = [
    mk('baseline', 'python', 'forward', iterations, (n) => baseline.run(n)),
  ];
  for (const conn of [stdio, http]) {
    for (const [form, value] of forms) {
      const n = form === 'array' ? arrayIterations : iterations;
      scenarios.push(mk(`${conn.kind}/${form}`, conn.kind, form, n, (k) => repeat(k, () => conn.callTool('infer', inferArgs(value)))));
    }
    scenarios.push(mk(`${conn.kind}/list_models`, conn.kind, 'list_models', iterations, (k) => repeat(k, () => conn.callTool('list_models', {}))));
    scenarios.push(mk(`${conn.kind}/ping`, conn.kind, 'ping', iterations, (k) => repeat(k, () => conn.ping())));
  }
  scenarios.push(mk('echo/b64', 'echo', 'b64 (parse only)', iterations, (k) => repeat(k, () => echo.call(inferArgs(input.b64)))));
  scenarios.push(mk('echo/b64+decode', 'echo', 'b64 + decode', iterations, (k) => repeat(k, () => echoDecode.call(inferArgs(input.b64)))));

  const wanted = opts.scenarios?.split(',').map((s) => s.trim());
  const active = scenarios.filter((s) => s.id === 'baseline' || !wanted || wanted.includes(s.id));

  for (const s of active) {
    log(`warm-up ${s.id}`);
    await s.run(s.form === 'array' ? Math.min(2, s.warmup) : s.warmup);
  }
  for (let r = 0; r < rounds; r++) {
    // Rotate the order each round so no scenario always follows the same one.
    const order = active.map((_, i) => active[(i + r) % active.length] as Scenario);
    for (const s of order) {
      const n = Math.ceil(s.iterations / rounds);
      const start = nowUs();
      const samples = await s.run(n);
      s.windows.push({ startUs: start, endUs: nowUs(), calls: samples.length });
      s.samples.push(...samples);
    }
    log(`round ${r + 1}/${rounds} done (${Math.round((performance.now() - t0) / 1000)} s)`);
  }
  const codec = codecReference(inferArgs(input.b64), inferArgs(input.array));

  await Promise.all([stdio.close(), http.close(), echo.close(), echoDecode.close(), baseline.close()]);
  rmSync(workDir, { recursive: true, force: true });

  const base = distribution((active[0] as Scenario).samples.map((s) => s.ms));
  const results = active.map((s) => summarizeScenario(s, base.p50));
  const profile = profileDir ? profileSummaries(profileDir, active) : undefined;
  const output = {
    benchmark: 'mcp-overhead',
    date: new Date().toISOString(),
    profiled: Boolean(profileDir),
    machine: machineInfo(ROOT, { python: String(runtime.python), torch: String(runtime.torch) }),
    config: {
      model: `${MODEL}@${runtime.version}`,
      threads: runtime.threads,
      input: { shape: SHAPE, dtype: 'float32', bytes: input.bytes, b64_chars: input.b64.b64.length, array_json_chars: JSON.stringify(input.array).length },
      iterations,
      array_iterations: arrayIterations,
      warmup,
      rounds,
      wall_s: round((performance.now() - t0) / 1000, 1),
    },
    scenarios: results,
    targets: targets(results),
    codec,
    ...(profile ? { profile } : {}),
  };
  const out = opts.out ? resolve(opts.out) : join(resultsDir, `mcp-overhead-${stamp}.json`);
  writeFileSync(out, `${JSON.stringify(output, null, 2)}\n`);
  printReport(output.scenarios, output.targets, codec, profile);
  log(`wrote ${out}${profileDir ? ` and profiles under ${profileDir}` : ''}`);
}

function mk(id: string, transport: Scenario['transport'], form: Form, n: number, run: Scenario['run']): Scenario {
  return { id, transport, form, iterations: n, warmup, run, samples: [], windows: [] };
}

function summarizeScenario(s: Scenario, baseP50: number): ScenarioResult {
  const latency = distribution(s.samples.map((x) => x.ms));
  const timed = s.samples.filter((x) => x.timings);
  const result: ScenarioResult = {
    id: s.id,
    transport: s.transport,
    form: s.form,
    latency,
    overhead_p50_ms: round(latency.p50 - baseP50),
  };
  if (timed.length > 0) {
    result.paired_overhead_p50_ms = round(median(timed.map((x) => x.ms - (x.timings?.compute_ms ?? 0))));
    result.outside_gateway_ms = round(median(timed.map((x) => x.ms - (x.timings?.total_ms ?? 0))));
    result.stages = medianPerKey(timed.map((x) => ({ ...x.timings }) as unknown as Record<string, number>));
  }
  const split = s.samples.filter((x) => x.client).map((x) => x.client as unknown as Record<string, number>);
  if (split.length > 0) result.client = medianPerKey(split);
  return result;
}

function targets(results: ScenarioResult[]) {
  const get = (id: string) => results.find((r) => r.id === id);
  const echo = get('echo/b64');
  const out: Record<string, unknown> = {};
  for (const kind of ['stdio', 'http']) {
    const path = get(`${kind}/path`);
    if (path) {
      out[`${kind}_path`] = {
        target: `p50 overhead <= ${PATH_TARGET_MS} ms`,
        overhead_p50_ms: path.overhead_p50_ms,
        paired_overhead_p50_ms: path.paired_overhead_p50_ms,
        met: path.overhead_p50_ms <= PATH_TARGET_MS,
      };
    }
    const b64 = get(`${kind}/b64`);
    if (b64 && echo) {
      const ratio = round(b64.overhead_p50_ms / echo.latency.p50, 2);
      out[`${kind}_b64`] = {
        target: `b64 overhead <= ${B64_ECHO_RATIO_TARGET}x bare echo p50`,
        overhead_p50_ms: b64.overhead_p50_ms,
        echo_p50_ms: echo.latency.p50,
        ratio,
        paired_ratio: round((b64.paired_overhead_p50_ms ?? Number.NaN) / echo.latency.p50, 2),
        met: ratio <= B64_ECHO_RATIO_TARGET,
      };
    }
  }
  return out;
}

/** In-process costs of the JSON a tools/call carries: what any JSON-RPC transport pays at least. */
function codecReference(b64Args: unknown, arrayArgs: unknown) {
  const time = (f: () => unknown, n = 10) => {
    const ms: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      f();
      ms.push(performance.now() - t);
    }
    return round(median(ms));
  };
  const message = (args: unknown) => ({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'infer', arguments: args } });
  const b64Text = JSON.stringify(message(b64Args));
  const arrayText = JSON.stringify(message(arrayArgs));
  const b64 = (b64Args as { inputs: { image: { b64: string } } }).inputs.image.b64;
  return {
    b64_request_chars: b64Text.length,
    b64_stringify_ms: time(() => JSON.stringify(message(b64Args))),
    b64_parse_ms: time(() => JSON.parse(b64Text)),
    b64_decode_ms: time(() => Buffer.from(b64, 'base64')),
    array_request_chars: arrayText.length,
    array_stringify_ms: time(() => JSON.stringify(message(arrayArgs)), 5),
    array_parse_ms: time(() => JSON.parse(arrayText), 5),
  };
}

function profileSummaries(dir: string, active: Scenario[]): Record<string, ProfileSummary> {
  const out: Record<string, ProfileSummary> = {};
  for (const kind of ['stdio', 'http'] as const) {
    const sub = join(dir, kind);
    if (!existsSync(sub)) continue;
    const profile = loadProfile(sub);
    for (const s of active.filter((x) => x.transport === kind)) out[s.id] = summarize(profile, s.windows);
  }
  return out;
}

const f = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '' : x.toFixed(2));

function printReport(
  results: ScenarioResult[],
  goals: Record<string, unknown>,
  codec: ReturnType<typeof codecReference>,
  profile: Record<string, ProfileSummary> | undefined,
): void {
  const rows = [
    ['scenario', 'n', 'p50', 'p99', 'overhead p50', 'paired ovh', 'outside gw', 'decode', 'queue', 'transfer', 'compute', 'encode', 'srv total'],
    ...results.map((r) => [
      r.id,
      String(r.latency.n),
      f(r.latency.p50),
      f(r.latency.p99),
      r.id === 'baseline' ? '' : f(r.overhead_p50_ms),
      f(r.paired_overhead_p50_ms),
      f(r.outside_gateway_ms),
      f(r.stages?.decode_ms),
      f(r.stages?.queue_ms),
      f(r.stages?.transfer_ms),
      f(r.stages?.compute_ms),
      f(r.stages?.encode_ms),
      f(r.stages?.total_ms),
    ]),
  ];
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length))) ?? [];
  const lines = rows.map((row) => row.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join('  '));
  process.stdout.write(`\nAll times in ms. overhead = scenario p50 - baseline p50; paired ovh = median(call - worker compute_ms);\noutside gw = median(call - server total_ms): MCP SDK, transport and client.\n\n${lines.join('\n')}\n\n`);
  for (const [name, goal] of Object.entries(goals)) process.stdout.write(`target ${name}: ${JSON.stringify(goal)}\n`);
  process.stdout.write(`codec reference (in-process, this client): ${JSON.stringify(codec)}\n`);
  if (!profile) return;
  for (const [id, p] of Object.entries(profile)) {
    if (!/\/(path|b64|list_models)$/.test(id)) continue;
    process.stdout.write(`\nserver profile ${id}: busy ${p.busy_ms_per_call} ms/call; by category ${JSON.stringify(p.by_category)}\n`);
    for (const c of p.top_self.slice(0, 10)) process.stdout.write(`  self ${c.ms_per_call.toFixed(3)}  ${c.frame}\n`);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
