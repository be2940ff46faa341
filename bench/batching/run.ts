/**
 * bench/batching: what dynamic batching buys under concurrent load, batching on against off in
 * one run.
 *
 *   node --import tsx bench/batching/run.ts [--concurrency 1,8,32,64]
 *        [--tabular 64:500,64:2000,64:1000:8.16.32] [--image 8:2000,4:2000] [--tabular-seconds 4]
 *        [--image-seconds 6] [--rounds 2] [--warmup 0.5]
 *        [--tabular-form array|b64] [--image-form path|b64] [--models DIR] [--only tabular,image] [--out FILE]
 *
 * Closed-loop clients (each sends its next call as soon as the last one is answered) at every
 * concurrency, against the small tabular model (one row per call) and the image model (version 1,
 * one image per call), once unbatched and once per batching setting given (max_batch_size:
 * max_queue_delay_us[:preferred sizes]). The gateway runs in this process with its real Python
 * workers and shared memory, but without the MCP transport, so what is measured is the gateway
 * pipeline and the scheduler, not JSON-RPC. The demo models are built with
 * scripts/make_demo_models.py into a temporary folder (or taken from --models), and each setting
 * is a renamed copy of the model with that `batching` section, version 1 only. A fresh gateway
 * per model and concurrency: the other model's workers are not running meanwhile, and no cell pays
 * for the tensor-store garbage of the ones before it. Per concurrency the variants run
 * interleaved in rounds, so that drift of the machine hits all alike; blocks disturbed by other
 * processes are measured again. Each block: warm-up, then a measured window between two answers;
 * throughput = answers in the window / its length. Results go to
 * bench/results/batching-<time>.json; `node --import tsx bench/report.ts` renders them into
 * docs/benchmarks.md.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { PerformanceObserver, performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Progress } from '../../src/cli/progress.js';
import { defaultConfig } from '../../src/config.js';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { Gateway, type Logger } from '../../src/gateway.js';
import { cpuSnapshot, foreignLoad, waitForQuiet } from '../mcp-overhead/contention.js';
import { makeInput } from '../mcp-overhead/inputs.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { type Distribution, round } from '../mcp-overhead/stats.js';
import { buildDemoModels, makeVariant, parseSettings, resourcesOf, SOURCE_MODEL, type Variant } from './models.js';
import type { BatchingResult, CellResult, ModelKey, ModelSetup, TargetResult } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const TABULAR_TARGET = 5;
const IMAGE_TARGET = 1.3;

const { values: opts } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,8,32,64' },
    tabular: { type: 'string', default: '64:500,64:2000,64:1000:8.16.32' },
    image: { type: 'string', default: '8:2000,4:2000' },
    'tabular-seconds': { type: 'string', default: '4' },
    'image-seconds': { type: 'string', default: '6' },
    rounds: { type: 'string', default: '2' },
    warmup: { type: 'string', default: '0.5' },
    'tabular-form': { type: 'string', default: 'array' },
    'image-form': { type: 'string', default: 'path' },
    models: { type: 'string' },
    python: { type: 'string', default: pythonExecutable() },
    only: { type: 'string', default: 'tabular,image' },
    out: { type: 'string' },
    'quiet-wait': { type: 'string', default: '60' },
    'max-foreign': { type: 'string', default: '0.15' },
    verbose: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
});
if (opts.help) {
  process.stdout.write(
    'usage: node --import tsx bench/batching/run.ts [--concurrency 1,8,32,64]\n' +
      '         [--tabular 64:500,64:2000,64:1000:8.16.32] [--image 8:2000,4:2000] [--tabular-seconds 4]\n' +
      '         [--image-seconds 6] [--rounds 2] [--warmup 0.5]\n' +
      '         [--tabular-form array|b64] [--image-form path|b64] [--models DIR] [--python EXE]\n' +
      '         [--only tabular,image] [--out FILE] [--quiet-wait 60] [--max-foreign 0.15] [--verbose]\n' +
      'A batching setting is max_batch_size:max_queue_delay_us[:preferred sizes joined by "."], e.g. 8:4000:4.8.\n',
  );
  process.exit(0);
}

const concurrencies = opts.concurrency.split(',').map(Number);
const rounds = Math.max(1, Number(opts.rounds));
const warmupS = Number(opts.warmup);
const maxForeign = Number(opts['max-foreign']);
const seconds: Record<ModelKey, number> = {
  tabular: Number(opts['tabular-seconds']),
  image: Number(opts['image-seconds']),
};
const settings = { tabular: parseSettings(opts.tabular), image: parseSettings(opts.image) };
const only = new Set(opts.only.split(',').map((s) => s.trim()) as ModelKey[]);
const forms = { tabular: opts['tabular-form'], image: opts['image-form'] };
if (!['array', 'b64'].includes(forms.tabular)) throw new Error('--tabular-form is array or b64');
if (!['path', 'b64'].includes(forms.image)) throw new Error('--image-form is path or b64');
/** Waiting for quiet before measuring a block again stops once this much of the run was spent on it. */
let redoBudgetMs = 60_000;

/** Rounds done of the blocks being measured, on a terminal's stderr; log lines print above it. */
let progress: Progress | undefined;

function log(line: string): void {
  const write = () => process.stderr.write(`[bench] ${line}\n`);
  if (progress) progress.interrupt(write);
  else write();
}

/** Garbage-collection pauses of this process (start and duration, ms), to attribute latency tails. */
const gcPauses: { start: number; ms: number }[] = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcPauses.push({ start: e.startTime, ms: e.duration });
}).observe({ entryTypes: ['gc'] });

/** Sorted copy; the percentile helpers below take sorted arrays (cells hold 100k+ samples). */
function sorted(xs: readonly number[]): Float64Array {
  return Float64Array.from(xs).sort();
}

/** Nearest-rank percentile of sorted samples; NaN when there are none. */
function pct(sortedXs: ArrayLike<number>, p: number): number {
  if (sortedXs.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sortedXs.length);
  return sortedXs[Math.min(sortedXs.length, Math.max(1, rank)) - 1] as number;
}

function distribution(samples: readonly number[]): Distribution {
  const s = sorted(samples);
  let sum = 0;
  for (const x of s) sum += x;
  return {
    n: s.length,
    p50: round(pct(s, 50)),
    p90: round(pct(s, 90)),
    p99: round(pct(s, 99)),
    min: round(s[0] ?? Number.NaN),
    max: round(s[s.length - 1] ?? Number.NaN),
    mean: round(sum / Math.max(1, s.length)),
  };
}

interface Sample {
  ms: number;
  compute: number;
  queue: number;
  transfer: number;
  decode: number;
  encode: number;
  batch: number;
}

/** Everything one cell (model variant x concurrency) collected over its blocks. */
interface Cell {
  variant: Variant;
  concurrency: number;
  samples: Sample[];
  windowMs: number;
  errors: Map<string, number>;
  batches: Map<number, number>;
  nodeCpuMs: number;
  oursCpuMs: number;
  gcMs: number;
  gcMaxMs: number;
  foreign: number[];
  discarded: number;
}

/**
 * One block: `concurrency` closed-loop clients; after the warm-up (at least warmupS and one answer
 * per client), a window of `windowS` seconds that starts and ends at an answer. Only answers inside
 * the window count; the clients then finish their calls in flight and stop.
 */
async function runBlock(
  gateway: Gateway,
  cell: Cell,
  request: Parameters<Gateway['infer']>[0],
  windowS: number,
): Promise<number | undefined> {
  const { concurrency } = cell;
  const name = cell.variant.registered_as;
  const batchesOf = () => new Map(Object.entries(gateway.poolStats(name, '1')?.batches ?? {}).map(([k, v]) => [+k, v]));
  let phase: 'warmup' | 'measure' | 'stop' = 'warmup';
  const started = performance.now();
  let warmAnswers = 0;
  let windowStart = 0;
  let windowEnd = 0;
  let before: { batches: Map<number, number>; cpu: NodeJS.CpuUsage; snap: ReturnType<typeof cpuSnapshot> } | undefined;
  const samples: Sample[] = [];
  const errors = new Map<string, number>();
  let after: typeof before;

  const onAnswer = (now: number): boolean => {
    if (phase === 'warmup') {
      warmAnswers += 1;
      if (now - started >= warmupS * 1000 && warmAnswers >= concurrency) {
        before = { batches: batchesOf(), cpu: process.cpuUsage(), snap: cpuSnapshot() };
        windowStart = performance.now();
        phase = 'measure';
      }
      return false;
    }
    if (phase !== 'measure') return false;
    if (now - windowStart >= windowS * 1000) {
      windowEnd = now;
      after = { batches: batchesOf(), cpu: process.cpuUsage(), snap: cpuSnapshot() };
      phase = 'stop';
    }
    return true; // the answer that closes the window is inside it
  };

  const client = async (): Promise<void> => {
    while (phase !== 'stop') {
      const t0 = performance.now();
      try {
        const r = await gateway.infer(request);
        const t1 = performance.now();
        if (r.outputs[0]?.shape[0] !== 1) throw new Error(`expected one row back, got shape ${r.outputs[0]?.shape}`);
        if (onAnswer(t1)) {
          const t = r.timings;
          samples.push({
            ms: t1 - t0,
            compute: t.compute_ms,
            queue: t.queue_ms,
            transfer: t.transfer_ms,
            decode: t.decode_ms,
            encode: t.encode_ms,
            batch: r.batch_size,
          });
        }
      } catch (err) {
        const code = (err as { code?: string }).code ?? (err as Error).message;
        if (onAnswer(performance.now())) errors.set(code, (errors.get(code) ?? 0) + 1);
        if (!(err as { code?: string }).code) throw err;
      }
    }
  };

  let timer: NodeJS.Timeout | undefined;
  const guardMs = (warmupS + windowS) * 1000 + 60_000;
  const stalled = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${name} at concurrency ${concurrency} stalled: no end after ${guardMs / 1000} s`)),
      guardMs,
    );
  });
  try {
    await Promise.race([Promise.all(Array.from({ length: concurrency }, client)), stalled]);
  } finally {
    clearTimeout(timer);
  }
  if (!before || !after) throw new Error('block ended without a window');
  await new Promise((r) => setImmediate(r)); // let the observer deliver the last GC entries
  const pauses = gcPauses.splice(0).filter((g) => g.start >= windowStart && g.start < windowEnd);

  const foreign = foreignLoad(before.snap, after.snap);
  if (foreign !== undefined && foreign > maxForeign && redoBudgetMs > 0 && cell.discarded < 3) return foreign;

  cell.samples.push(...samples);
  cell.windowMs += windowEnd - windowStart;
  for (const [code, n] of errors) cell.errors.set(code, (cell.errors.get(code) ?? 0) + n);
  for (const [rows, n] of after.batches) {
    const delta = n - (before.batches.get(rows) ?? 0);
    if (delta > 0) cell.batches.set(rows, (cell.batches.get(rows) ?? 0) + delta);
  }
  const nodeUs = after.cpu.user + after.cpu.system - before.cpu.user - before.cpu.system;
  cell.nodeCpuMs += nodeUs / 1000;
  for (const g of pauses) {
    cell.gcMs += g.ms;
    cell.gcMaxMs = Math.max(cell.gcMaxMs, g.ms);
  }
  if (before.snap && after.snap) cell.oursCpuMs += (after.snap.ourBusy - before.snap.ourBusy) * 10; // 10 ms ticks
  if (foreign !== undefined) cell.foreign.push(foreign);
  return undefined;
}

async function measure(gateway: Gateway, cell: Cell, request: Parameters<Gateway['infer']>[0], windowS: number) {
  for (;;) {
    const foreign = await runBlock(gateway, cell, request, windowS);
    if (foreign === undefined) return;
    cell.discarded += 1;
    log(
      `${cell.variant.registered_as} c=${cell.concurrency}: other processes used ${Math.round(foreign * 100)}% of the CPUs; measuring the block again`,
    );
    const waitStart = performance.now();
    await waitForQuiet(Math.min(30_000, redoBudgetMs), maxForeign / 2, log);
    redoBudgetMs -= performance.now() - waitStart;
  }
}

function summarize(cell: Cell): CellResult {
  const s = cell.samples;
  const p = (xs: Float64Array, q: number) => round(pct(xs, q));
  const compute = sorted(s.map((x) => x.compute));
  const queue = sorted(s.map((x) => x.queue));
  const median = (f: (x: Sample) => number) => pct(sorted(s.map(f)), 50);
  const passes = [...cell.batches.values()].reduce((a, b) => a + b, 0);
  const rows = [...cell.batches].reduce((a, [r, n]) => a + r * n, 0);
  const windowS = cell.windowMs / 1000;
  // Each call reports its batch's forward time: divided by the rows, the calls of a batch add up to it.
  const forwardMs = s.reduce((a, x) => a + x.compute / Math.max(1, x.batch), 0);
  const b = cell.variant.batching;
  const out: CellResult = {
    model: cell.variant.model,
    variant: cell.variant.id,
    batching: b,
    concurrency: cell.concurrency,
    requests: s.length,
    window_s: round(windowS, 2),
    errors: Object.fromEntries(cell.errors),
    throughput_rps: round(s.length / windowS, 1),
    latency: distribution(s.map((x) => x.ms)),
    compute_ms: { p50: p(compute, 50), p99: p(compute, 99) },
    queue_ms: { p50: p(queue, 50), p99: p(queue, 99) },
    transfer_ms_p50: round(median((x) => x.transfer)),
    decode_ms_p50: round(median((x) => x.decode)),
    encode_ms_p50: round(median((x) => x.encode)),
    batches: Object.fromEntries([...cell.batches].sort((x, y) => x[0] - y[0])),
    forward_passes: passes,
    mean_batch_rows: round(rows / Math.max(1, passes), 2),
    forward_busy_pct: round((100 * forwardMs) / cell.windowMs, 1),
    node_cpu_pct: round((100 * cell.nodeCpuMs) / cell.windowMs, 1),
    workers_cpu_pct: round((100 * Math.max(0, cell.oursCpuMs - cell.nodeCpuMs)) / cell.windowMs, 1),
    gc_pct: round((100 * cell.gcMs) / cell.windowMs, 1),
    gc_max_ms: round(cell.gcMaxMs, 2),
  };
  if (cell.foreign.length > 0) {
    out.foreign_cpu_pct = round((100 * cell.foreign.reduce((a, x) => a + x, 0)) / cell.foreign.length, 1);
  }
  if (b) {
    out.p99_bound_ms = round(b.max_queue_delay_us / 1000 + 2 * out.compute_ms.p50);
    out.waves = Math.ceil(cell.concurrency / b.max_batch_size);
  }
  return out;
}

/** A gateway with every variant of one model registered and loaded. */
async function openGateway(key: ModelKey, variants: Variant[], workDir: string, tag: string, gatewayLog: Logger) {
  const config = {
    ...defaultConfig(workDir),
    modelsDir: join(workDir, 'none'),
    registry: join(workDir, `registry-${key}-${tag}.db`),
    allowedRoots: [workDir],
  };
  const gateway = await Gateway.open(config, gatewayLog);
  try {
    for (const v of variants) {
      const info = await gateway.register(v.dir);
      const state = info.versions[0]?.state;
      if (state !== 'ready') throw new Error(`${v.registered_as} did not load: ${info.versions[0]?.error ?? state}`);
    }
  } catch (err) {
    await gateway.close();
    throw err;
  }
  return gateway;
}

/**
 * All cells of one model. Each concurrency gets a fresh gateway: the tensor store keeps every
 * output for its TTL (10 minutes), so the heap grows with every answer, and a gateway shared by
 * all cells would make the later ones pay for the garbage of the earlier ones.
 */
async function runModel(key: ModelKey, variants: Variant[], workDir: string, gatewayLog: Logger) {
  const shape = key === 'tabular' ? [1, 4] : [1, 3, 224, 224];
  const input = makeInput(join(workDir, `${key}.npy`), shape);
  const value =
    key === 'tabular'
      ? forms.tabular === 'array'
        ? input.array
        : input.b64
      : forms.image === 'path'
        ? { path: input.path }
        : input.b64;
  const inputName = key === 'tabular' ? 'features' : 'image';
  const cells: Cell[] = [];
  for (const concurrency of concurrencies) {
    const t0 = performance.now();
    const gateway = await openGateway(key, variants, workDir, String(concurrency), gatewayLog);
    log(`${key} c=${concurrency}: ${variants.length} variants loaded in ${Math.round(performance.now() - t0)} ms`);
    try {
      const row = variants.map(
        (variant): Cell => ({
          variant,
          concurrency,
          samples: [],
          windowMs: 0,
          errors: new Map(),
          batches: new Map(),
          nodeCpuMs: 0,
          oursCpuMs: 0,
          gcMs: 0,
          gcMaxMs: 0,
          foreign: [],
          discarded: 0,
        }),
      );
      // Redrawn once a second at most, so the indicator costs the measured process next to nothing.
      progress = new Progress({ label: `${key} c=${concurrency}`, total: rounds * row.length, intervalMs: 1000 });
      for (let r = 0; r < rounds; r++) {
        // Rotate the order each round so no variant always follows the same one.
        for (let i = 0; i < row.length; i++) {
          const cell = row[(i + r) % row.length] as Cell;
          progress.update({ detail: `round ${r + 1}/${rounds}: ${cell.variant.id}` });
          const request = { model: cell.variant.registered_as, version: '1', inputs: { [inputName]: value } };
          await measure(gateway, cell, request, seconds[key] / rounds);
          progress.tick();
        }
      }
      progress.stop();
      progress = undefined;
      for (const cell of row) {
        const s = summarize(cell);
        log(
          `${key} c=${concurrency} ${cell.variant.id}: ${s.throughput_rps} req/s, p50 ${s.latency.p50} ms, ` +
            `p99 ${s.latency.p99} ms, rows/pass ${s.mean_batch_rows}, node ${s.node_cpu_pct}% workers ${s.workers_cpu_pct}%`,
        );
      }
      log(
        `${key} c=${concurrency}: tensor store ${gateway.store.size} outputs, heap ${Math.round(process.memoryUsage().heapUsed / 2 ** 20)} MiB at the end`,
      );
      cells.push(...row);
    } finally {
      await gateway.close();
    }
  }
  const setup: ModelSetup = {
    name: SOURCE_MODEL[key],
    version: '1',
    input: {
      name: inputName,
      shape,
      dtype: 'float32',
      form: (key === 'tabular' ? forms.tabular : forms.image) as ModelSetup['input']['form'],
      bytes: input.bytes,
    },
    ...resourcesOf((variants[0] as Variant).dir),
  };
  return { cells: cells.map(summarize), setup };
}

function addRatios(cells: CellResult[]): void {
  for (const c of cells) {
    if (!c.batching) continue;
    const off = cells.find((o) => o.model === c.model && o.concurrency === c.concurrency && !o.batching);
    if (off && off.throughput_rps > 0) c.ratio_vs_off = round(c.throughput_rps / off.throughput_rps, 2);
  }
}

function pickBest(cells: CellResult[]): Partial<Record<ModelKey, string>> {
  const top = Math.max(...concurrencies);
  const best: Partial<Record<ModelKey, string>> = {};
  for (const key of ['tabular', 'image'] as ModelKey[]) {
    const at = cells.filter((c) => c.model === key && c.batching && c.concurrency === top);
    at.sort((a, b) => b.throughput_rps - a.throughput_rps);
    if (at[0]) best[key] = at[0].variant;
  }
  return best;
}

function targets(cells: CellResult[], best: Partial<Record<ModelKey, string>>): Record<string, TargetResult> {
  const top = Math.max(...concurrencies);
  const out: Record<string, TargetResult> = {};
  for (const [key, goal] of [
    ['tabular', TABULAR_TARGET],
    ['image', IMAGE_TARGET],
  ] as const) {
    const variant = best[key];
    if (!variant) continue;
    const cell = cells.find((c) => c.model === key && c.variant === variant && c.concurrency === top);
    const off = cells.find((c) => c.model === key && !c.batching && c.concurrency === top);
    if (cell && off && cell.ratio_vs_off !== undefined) {
      out[`${key}/throughput`] = {
        target: `throughput at concurrency ${top} >= ${goal}x unbatched`,
        measured: cell.ratio_vs_off,
        detail: `${variant}: ${cell.throughput_rps} req/s / off: ${off.throughput_rps} req/s`,
        met: cell.ratio_vs_off >= goal,
      };
    }
    for (const c of cells.filter((x) => x.model === key && x.variant === variant)) {
      if (c.p99_bound_ms === undefined || !c.batching) continue;
      const offP99 = cells.find((o) => o.model === key && !o.batching && o.concurrency === c.concurrency)?.latency.p99;
      const wavesNote =
        (c.waves ?? 1) > 1
          ? `; ${c.waves} full batches queue ahead of a call (concurrency ${c.concurrency} > max_batch_size ${c.batching.max_batch_size}), so the wait is at least ${c.waves} forward passes whatever the scheduler does`
          : '';
      out[`${key}/p99@${c.concurrency}`] = {
        target: `p99 <= max_queue_delay + 2 x batch compute = ${c.p99_bound_ms} ms`,
        measured: c.latency.p99,
        detail:
          `${variant}: ${c.batching.max_queue_delay_us / 1000} ms + 2 x ${c.compute_ms.p50} ms (compute p50)` +
          `${offP99 === undefined ? '' : `; unbatched p99 here ${offP99} ms`}${wavesNote}`,
        met: c.latency.p99 <= c.p99_bound_ms,
      };
    }
  }
  return out;
}

function printTable(cells: CellResult[]): void {
  const head = [
    'model',
    'variant',
    'conc',
    'req/s',
    'x off',
    'p50',
    'p99',
    'bound',
    'rows/pass',
    'compute p50',
    'queue p50',
    'busy %',
    'node %',
    'workers %',
    'gc %',
    'gc max',
  ];
  const rows = [
    head,
    ...cells.map((c) => [
      c.model,
      c.variant,
      String(c.concurrency),
      c.throughput_rps.toFixed(1),
      c.ratio_vs_off?.toFixed(2) ?? '',
      c.latency.p50.toFixed(2),
      c.latency.p99.toFixed(2),
      c.p99_bound_ms?.toFixed(2) ?? '',
      c.mean_batch_rows.toFixed(2),
      c.compute_ms.p50.toFixed(2),
      c.queue_ms.p50.toFixed(2),
      c.forward_busy_pct.toFixed(0),
      c.node_cpu_pct.toFixed(0),
      c.workers_cpu_pct.toFixed(0),
      c.gc_pct.toFixed(1),
      c.gc_max_ms.toFixed(1),
    ]),
  ];
  const widths = head.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  const lines = rows.map((r) => r.map((x, i) => (i < 2 ? x.padEnd(widths[i] ?? 0) : x.padStart(widths[i] ?? 0))));
  process.stdout.write(`\n${lines.map((l) => l.join('  ')).join('\n')}\n\n`);
}

async function main(): Promise<void> {
  const t0 = performance.now();
  const machine = machineInfo(ROOT); // before the run: its load average says how busy the machine was
  const workDir = mkdtempSync(join(tmpdir(), 'tensorgate-bench-batching-'));
  const resultsDir = join(ROOT, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  const gatewayLog: Logger = opts.verbose ? (l: string) => log(`gateway: ${l}`) : () => {};
  try {
    const source = opts.models ? resolve(opts.models) : join(workDir, 'demo');
    log(`demo models in ${source}`);
    buildDemoModels(ROOT, opts.python, source);
    const variants = {
      tabular: [null, ...settings.tabular].map((b) => makeVariant('tabular', source, join(workDir, 'repo'), b)),
      image: [null, ...settings.image].map((b) => makeVariant('image', source, join(workDir, 'repo'), b)),
    };
    const quietAtStart = await waitForQuiet(Number(opts['quiet-wait']) * 1000, maxForeign / 2, log);
    const cells: CellResult[] = [];
    const setups: Partial<Record<ModelKey, ModelSetup>> = {};
    for (const key of ['tabular', 'image'] as ModelKey[]) {
      if (!only.has(key)) continue;
      const { cells: got, setup } = await runModel(key, variants[key], workDir, gatewayLog);
      cells.push(...got);
      setups[key] = setup;
    }
    addRatios(cells);
    const best = pickBest(cells);
    const result: BatchingResult = {
      benchmark: 'batching',
      date: new Date().toISOString(),
      profiled: false,
      machine,
      config: {
        transport: 'in-process Gateway.infer (real Python workers and shared memory, no MCP transport)',
        concurrency: concurrencies,
        seconds,
        rounds,
        warmup_s: warmupS,
        models: setups as Record<ModelKey, ModelSetup>,
        variants: [...variants.tabular, ...variants.image]
          .filter((v) => only.has(v.model))
          .map(({ dir: _dir, ...v }) => v),
        max_foreign_cpu: maxForeign,
        foreign_cpu_pct_at_start: quietAtStart === undefined ? null : round(quietAtStart * 100, 1),
        wall_s: round((performance.now() - t0) / 1000, 1),
      },
      cells,
      best,
      targets: targets(cells, best),
    };
    printTable(cells);
    for (const [name, t] of Object.entries(result.targets)) {
      process.stdout.write(`target ${name}: ${t.target}: ${t.measured} [${t.detail}] ${t.met ? 'MET' : 'NOT MET'}\n`);
    }
    const out = opts.out ? resolve(opts.out) : join(resultsDir, `batching-${result.date.replace(/[:.]/g, '-')}.json`);
    writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    log(`wrote ${out} (${result.config.wall_s} s)`);
  } finally {
    rmSync(workDir, { recursive: true, force: true });
  }
}

await main();
