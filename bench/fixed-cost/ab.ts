/**
 * bench/fixed-cost/ab.ts: two builds of tensorgate side by side, on the fixed-cost scenarios, with
 * their calls interleaved, so that a change of a few µs per call can be told from the machine's
 * drift.
 *
 *   node --import tsx bench/fixed-cost/ab.ts --a CHECKOUT --b CHECKOUT [--a-label TEXT] [--b-label TEXT]
 *        [--calls 200] [--rounds 40] [--spin-us 2000] [--scenarios oip/binary,http/path,...] [--out FILE]
 *
 * Each CHECKOUT is a built tree (`npm run build`; a `git worktree` of another commit, with
 * node_modules, .tensorgate and build/Release linked or copied from this one). Separate runs of
 * run.ts drift by ±20-40 µs at p50 on the 2-core development VM, more than many a change is worth.
 * Here both builds serve at once, the same model repository, and every round runs each scenario
 * as a block of `calls` sequential calls on one build and then on the other, the order alternating
 * between rounds (ABBA), so that drift hits both alike; and each build is started first for half
 * of the rounds, since start order alone made a difference (see main). It reports each build's p50
 * over all its calls and the per-round differences of the block medians (B - A): their median,
 * and how many rounds B was faster. Run one build against itself to see the noise.
 *
 * Scenarios (all unless `--scenarios` names some): `oip/binary` and `stdio/path` as in run.ts,
 * each with the plain and the spinning copy of the tabular model, and `http/path` and
 * `http/list_models` over MCP Streamable HTTP (a session, the SDK's client). Results go to
 * bench/results/fixed-cost-ab-<time>.json; `bench/report.ts` renders them.
 */
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { McpConnection } from '../mcp-overhead/clients.js';
import { gitCommit, machineInfo } from '../mcp-overhead/machine.js';
import { median, round } from '../mcp-overhead/stats.js';
import { binaryRequest, postForHeader } from '../oip/requests.js';
import { startTensorgate, stopAll, stopProcess } from '../peers/harness.js';
import { fixedCostModels, INPUT, MODEL, SPIN_MODEL } from './models.js';
import type { FixedCostAbResult } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

const { values: opts } = parseArgs({
  options: {
    a: { type: 'string' },
    b: { type: 'string' },
    'a-label': { type: 'string' },
    'b-label': { type: 'string' },
    calls: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '40' },
    warmup: { type: 'string', default: '200' },
    'spin-us': { type: 'string', default: '2000' },
    scenarios: { type: 'string' },
    out: { type: 'string' },
  },
});
if (!opts.a || !opts.b) throw new Error('usage: ab.ts --a CHECKOUT --b CHECKOUT [--calls N] [--rounds N]');
const calls = Number(opts.calls);
const rounds = Number(opts.rounds);
const warmup = Number(opts.warmup);
const spinUs = Number(opts['spin-us']);

const ALL_SCENARIOS = [
  'oip/binary',
  'oip/binary+spin',
  'stdio/path',
  'stdio/path+spin',
  'http/path',
  'http/list_models',
] as const;
type Scenario = (typeof ALL_SCENARIOS)[number];
const SCENARIOS: readonly Scenario[] = opts.scenarios
  ? opts.scenarios.split(',').map((name) => {
      if (!(ALL_SCENARIOS as readonly string[]).includes(name))
        throw new Error(`unknown scenario ${name}; one of ${ALL_SCENARIOS.join(', ')}`);
      return name as Scenario;
    })
  : ALL_SCENARIOS;

interface Build {
  label: 'a' | 'b';
  root: string;
  calls: Record<Scenario, () => Promise<unknown>>;
  close: () => Promise<void>;
}

/** One build's gateways, over `models`, with `dir` (made here) for their registries and input file. */
async function startBuild(label: 'a' | 'b', root: string, models: string, dir: string, npy: string): Promise<Build> {
  mkdirSync(dir);
  const http = await startTensorgate(root, models, dir, /ready: .* at (http:\/\/[\d.]+:\d+)\/mcp/, [
    '--allow-root',
    dir,
  ]);
  // The stdio server's allowed root is its own work folder: the input file is copied there.
  const stdio = await McpConnection.open('stdio', { root, models, workDir: dir });
  await stdio.waitReady(SPIN_MODEL);
  const mcpHttp = await McpConnection.attach(`${http.base}/mcp`);
  const input = join(dir, 'row.npy');
  copyFileSync(npy, input);
  const body = binaryRequest({ input: 'features', output: 'probabilities', shape: [1, 4], outputBytes: 12 }, INPUT);
  const oip = (model: string) => () => postForHeader(http.base, `/v2/models/${model}/infer`, body);
  const path = (conn: McpConnection, model: string) => () =>
    conn.callTool('infer', { model, inputs: { features: { path: input } } });
  return {
    label,
    root,
    calls: {
      'oip/binary': oip(MODEL),
      'oip/binary+spin': oip(SPIN_MODEL),
      'stdio/path': path(stdio, MODEL),
      'stdio/path+spin': path(stdio, SPIN_MODEL),
      'http/path': path(mcpHttp, MODEL),
      'http/list_models': () => mcpHttp.callTool('list_models', {}),
    },
    close: async () => {
      await mcpHttp.close();
      await stdio.close();
      await stopProcess(http.child);
    },
  };
}

/** Milliseconds of each of `n` sequential calls. */
async function block(call: () => Promise<unknown>, n: number): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await call();
    ms.push(performance.now() - t0);
  }
  return ms;
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'tg-bench-ab-'));
  const { repo: models, npy } = fixedCostModels(ROOT, work, spinUs);
  const roots = { a: resolve(opts.a as string), b: resolve(opts.b as string) };
  const all = new Map<Scenario, { a: number[]; b: number[]; diffs: number[] }>(
    SCENARIOS.map((name) => [name, { a: [], b: [], diffs: [] }]),
  );
  const started = performance.now();
  // The build started second measured faster, whatever it was: 20-25 µs at p50 with the spinning
  // worker when both were the same checkout. So each build is started first for half the rounds.
  for (const [half, first] of [
    [0, 'a'],
    [1, 'b'],
  ] as const) {
    process.stderr.write(`starting both builds, ${first} first...\n`);
    const second = first === 'a' ? 'b' : 'a';
    const builds = {
      [first]: await startBuild(first, roots[first], models, join(work, `${first}${half}`), npy),
      [second]: await startBuild(second, roots[second], models, join(work, `${second}${half}`), npy),
    } as Record<'a' | 'b', Build>;
    for (const name of SCENARIOS) for (const build of [builds.a, builds.b]) await block(build.calls[name], warmup);
    const halfRounds = half === 0 ? Math.ceil(rounds / 2) : Math.floor(rounds / 2);
    for (let r = 0; r < halfRounds; r++) {
      process.stderr.write(`round ${r + 1}/${halfRounds}\n`);
      const order = r % 2 === 0 ? [builds.a, builds.b] : [builds.b, builds.a];
      for (const name of SCENARIOS) {
        const medians: Record<string, number> = {};
        const into = all.get(name) as { a: number[]; b: number[]; diffs: number[] };
        for (const build of order) {
          const ms = await block(build.calls[name], calls);
          into[build.label].push(...ms);
          medians[build.label] = median(ms);
        }
        into.diffs.push((medians.b as number) - (medians.a as number));
      }
    }
    await Promise.all([builds.a.close(), builds.b.close()]);
  }

  const results = SCENARIOS.map((name) => {
    const { a: msA, b: msB, diffs } = all.get(name) as { a: number[]; b: number[]; diffs: number[] };
    return {
      scenario: name,
      p50_a_ms: round(median(msA)),
      p50_b_ms: round(median(msB)),
      diff_us: Math.round(median(diffs) * 1000),
      b_faster_rounds: diffs.filter((d) => d < 0).length,
    };
  });
  const build = (root: string, label: string | undefined) => ({
    root,
    commit: gitCommit(root),
    ...(label ? { label } : {}),
  });
  const result: FixedCostAbResult = {
    benchmark: 'fixed-cost-ab',
    date: new Date().toISOString(),
    profiled: false,
    machine: machineInfo(ROOT),
    a: build(roots.a, opts['a-label']),
    b: build(roots.b, opts['b-label']),
    config: { calls, rounds, warmup, spin_us: spinUs, seconds: round((performance.now() - started) / 1000, 1) },
    results,
  };
  console.log(
    `A ${result.a.commit} ${roots.a}\nB ${result.b.commit} ${roots.b}\n${calls} calls per block, ${rounds} rounds (ABBA, each build started first for half of them)`,
  );
  console.log('scenario             p50 A ms  p50 B ms  B-A µs (median of rounds)  B faster in');
  for (const r of results)
    console.log(
      `${r.scenario.padEnd(20)} ${r.p50_a_ms.toFixed(3).padStart(8)}  ${r.p50_b_ms.toFixed(3).padStart(8)}  ${String(r.diff_us).padStart(7)}                    ${r.b_faster_rounds}/${rounds}`,
    );
  const out =
    opts.out ?? join(ROOT, 'bench', 'results', `fixed-cost-ab-${result.date.slice(0, 19).replace(/:/g, '-')}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  process.stderr.write(`wrote ${out}\n`);
}

main().catch(async (err: unknown) => {
  console.error(err);
  await stopAll();
  process.exit(1);
});
