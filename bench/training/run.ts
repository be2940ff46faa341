/**
 * bench/training: what steering a training loop through tensorgate costs the loop.
 *
 *   node --import tsx bench/training/run.ts [--sizes small:128:64:1500,medium:256:128:400]
 *        [--rounds 3] [--micro-steps 200000] [--out FILE]
 *
 * The same CPU training loop (bench/training/loop.py: an MLP 256-H-H-10 on batches of B, SGD, one
 * torch thread) for a fixed number of steps, per size (name:H:B:steps), in four modes run
 * interleaved in rounds so that drift hits all alike:
 *   none      the loop alone (the baseline);
 *   sdk_idle  attached with tensorgate.train; the real server (`tensorgate serve --http`) polls
 *             the run file ten times a second; no agent;
 *   sdk       the same, while an MCP client reads the run with get_run ten times a second and
 *             changes lr with set_hyperparameters every 10 steps;
 *   naive     the user report's setup: loss.item() every step and an HTTP request every 10 steps
 *             to a control server whose reply (the lr) the loop waits for.
 * On a machine of two or more cores the loop is pinned to the last core and the server and this
 * driver to the first, as a training job's own core would be on a real machine: what is measured
 * is the cost to the loop, not the kernel moving the server onto the loop's core.
 * Per mode: the median step time over the rounds' medians and its ratio to `none`; each mode also
 * times its own calls in place (loop.py's hook). Then `micro`: the SDK's own cost per step (log +
 * apply in a tight loop). Results go to bench/results/training-<time>.json;
 * `node --import tsx bench/report.ts` renders them.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { startProcess, stopProcess } from '../peers/harness.js';
import type { LoopResult, MicroResult, TrainingResult } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PYTHON = pythonExecutable();
const MODES = ['none', 'sdk_idle', 'sdk', 'naive'] as const;
type Mode = (typeof MODES)[number];

const { values: opts } = parseArgs({
  options: {
    sizes: { type: 'string', default: 'small:128:64:1500,medium:256:128:400' },
    rounds: { type: 'string', default: '3' },
    'micro-steps': { type: 'string', default: '200000' },
    out: { type: 'string' },
  },
});

const CORES = cpus().length;
const LOOP_CPU = CORES >= 2 ? CORES - 1 : undefined;
/** Runs a command on core 0 (when the loop has a core of its own). */
const onCore0 = (argv: string[]) => (LOOP_CPU === undefined ? argv : ['taskset', '-c', '0', ...argv]);

const work = mkdtempSync(join(tmpdir(), 'tg-bench-training-'));
const runsDir = join(work, 'runs');
const env = { ...process.env, PYTHONPATH: join(ROOT, 'python'), TENSORGATE_RUNS_DIR: runsDir };

/** The real server on a runs directory of its own, and an MCP client over Streamable HTTP. */
async function startServer(): Promise<{ client: Client; pid: number; stop: () => Promise<void> }> {
  mkdirSync(join(work, 'models'), { recursive: true });
  const [command, ...args] = onCore0([
    process.execPath,
    join(ROOT, 'bin', 'tensorgate.js'),
    ...['--models', join(work, 'models'), '--registry', join(work, 'r.db')],
    ...['--runs-dir', runsDir, '--audit-log', join(work, 'audit.jsonl'), 'serve', '--http', '0'],
  ]) as [string, ...string[]];
  // Its output is read only until it is ready: the request log that follows costs this process nothing.
  const { child, match } = await startProcess(command, args, ROOT, /(http:\/\/[\d.]+:\d+\/mcp)/);
  const client = new Client({ name: 'bench-agent', version: '0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(match[1] as string)));
  return {
    client,
    pid: child.pid as number,
    stop: async () => {
      await client.close();
      await stopProcess(child);
    },
  };
}

/** The naive setup's control server: answers every request at once with the lr to use. */
async function startControlServer(): Promise<{ url: string; requests: () => number; stop: () => void }> {
  let requests = 0;
  const server = createServer((_req, res) => {
    requests++;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ lr: requests % 2 ? 0.05 : 0.04 }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}/lr`, requests: () => requests, stop: () => server.close() };
}

/**
 * The agent of the sdk mode: reads the run with get_run ten times a second, and changes lr every
 * 10 steps: each change asks for the next multiple of 10 as its apply_at_step, and the next one
 * is sent 10 steps (estimated from the baseline's step time) later.
 */
function agent(client: Client, runId: Promise<string>, stepMs: number) {
  let stop = false;
  let changes = 0;
  let reads = 0;
  const reader = (async () => {
    const run = await runId;
    while (!stop) {
      await client.callTool({ name: 'get_run', arguments: { run, points: 0 } });
      reads++;
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const changer = (async () => {
    const run = await runId;
    while (!stop) {
      const lr = changes % 2 ? 0.05 : 0.04;
      const report = await client.callTool({ name: 'get_run', arguments: { run, points: 0 } });
      const step = (report.structuredContent as { step?: number } | undefined)?.step ?? 0;
      const at = (Math.floor(Math.max(step, 0) / 10) + 1) * 10;
      const answer = await client.callTool({
        name: 'set_hyperparameters',
        arguments: { run, values: { lr }, apply_at_step: at },
      });
      if (!answer.isError) changes++;
      await new Promise((r) => setTimeout(r, 10 * stepMs));
    }
  })();
  return {
    finish: async () => {
      stop = true;
      await Promise.all([reader, changer]).catch(() => {});
      return { changes, reads };
    },
  };
}

function loop(mode: string, args: string[]): { runId: Promise<string>; result: Promise<Record<string, unknown>> } {
  const cpu = LOOP_CPU === undefined ? [] : ['--cpu', String(LOOP_CPU)];
  const child = spawn(PYTHON, [join(ROOT, 'bench/training/loop.py'), '--mode', mode, ...cpu, ...args], {
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: Record<string, unknown>[] = [];
  let gotId: (id: string) => void = () => {};
  const runId = new Promise<string>((r) => {
    gotId = r;
  });
  createInterface({ input: child.stdout }).on('line', (line) => {
    const parsed = JSON.parse(line) as Record<string, unknown>;
    if (typeof parsed.run_id === 'string') gotId(parsed.run_id);
    else lines.push(parsed);
  });
  const result = new Promise<Record<string, unknown>>((resolveResult, reject) =>
    child.once('exit', (code) =>
      code === 0 && lines[0] ? resolveResult(lines[0]) : reject(new Error(`loop.py --mode ${mode} exited ${code}`)),
    ),
  );
  return { runId, result };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

/** CPU seconds a process has used (user + system), from /proc. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

interface Size {
  name: string;
  hidden: number;
  batch: number;
  steps: number;
}

function parseSizes(spec: string): Size[] {
  return spec.split(',').map((item) => {
    const [name, hidden, batch, steps] = item.split(':');
    const size = { name: name ?? '', hidden: Number(hidden), batch: Number(batch), steps: Number(steps) };
    if (!size.name || ![size.hidden, size.batch, size.steps].every((n) => Number.isInteger(n) && n > 0))
      throw new Error(`--sizes takes name:hidden:batch:steps, got ${item}`);
    return size;
  });
}

/** One size: the four modes, interleaved over the rounds. */
async function measureSize(
  size: Size,
  rounds: number,
  server: Awaited<ReturnType<typeof startServer>>,
  controlUrl: string,
): Promise<TrainingResult['sizes'][number]> {
  const runs: Record<Mode, LoopResult[]> = { none: [], sdk_idle: [], sdk: [], naive: [] };
  for (let round = 0; round < rounds; round++) {
    // Rotate the order each round, so no mode always runs first (or right after another).
    const order = MODES.map((_, i) => MODES[(i + round) % MODES.length] as Mode);
    for (const mode of order) {
      const args = ['--steps', String(size.steps), '--hidden', String(size.hidden), '--batch', String(size.batch)];
      const cpuBefore = cpuSeconds(server.pid);
      const started = performance.now();
      const { runId, result } = loop(mode === 'sdk_idle' ? 'sdk' : mode, [...args, '--control-url', controlUrl]);
      const stepMs = runs.none.length ? median(runs.none.map((r) => r.median_us)) / 1000 : 3;
      const steering = mode === 'sdk' ? agent(server.client, runId, stepMs) : undefined;
      const loopResult = await result;
      const agentResult = steering ? await steering.finish() : undefined;
      const serverCpu = (cpuSeconds(server.pid) - cpuBefore) / ((performance.now() - started) / 1000);
      const entry: LoopResult = {
        round,
        median_us: loopResult.median_us as number,
        mean_us: loopResult.mean_us as number,
        p90_us: loopResult.p90_us as number,
        p99_us: loopResult.p99_us as number,
        hook_median_us: loopResult.hook_median_us as number,
        hook_mean_us: loopResult.hook_mean_us as number,
        distinct_lrs: loopResult.distinct_lrs as number,
        lr_changes: loopResult.lr_changes as number,
        server_cpu_percent: Math.round(serverCpu * 1000) / 10,
        ...(agentResult ? { changes_sent: agentResult.changes, get_run_calls: agentResult.reads } : {}),
        ...(mode === 'naive' ? { http_requests: loopResult.naive_requests as number } : {}),
      };
      runs[mode].push(entry);
      process.stderr.write(
        `${size.name} round ${round + 1}/${rounds} ${mode}: median ${entry.median_us.toFixed(1)} us/step\n`,
      );
    }
  }
  const baseline = median(runs.none.map((r) => r.median_us));
  const modes = Object.fromEntries(
    MODES.map((mode) => {
      const m = median(runs[mode].map((r) => r.median_us));
      return [mode, { median_us: m, vs_none: m / baseline, overhead_us: m - baseline, runs: runs[mode] }];
    }),
  ) as TrainingResult['sizes'][number]['modes'];
  return { ...size, modes };
}

async function main(): Promise<void> {
  if (LOOP_CPU !== undefined)
    execFileSync('taskset', ['-a', '-p', '-c', '0', String(process.pid)], { stdio: 'ignore' });
  const sizes = parseSizes(opts.sizes);
  const rounds = Number(opts.rounds);
  const server = await startServer();
  const control = await startControlServer();
  const measured: TrainingResult['sizes'] = [];
  for (const size of sizes) measured.push(await measureSize(size, rounds, server, control.url));
  const micro = (await loop('micro', ['--steps', String(opts['micro-steps'])]).result) as unknown as MicroResult;
  await server.stop();
  control.stop();

  const result: TrainingResult = {
    benchmark: 'training',
    date: new Date().toISOString(),
    profiled: false,
    machine: machineInfo(ROOT, { torch: String((micro as unknown as { torch: string }).torch) }),
    config: {
      rounds,
      warmup: 100,
      model: 'MLP 256-H-H-10, SGD with momentum, 1 torch thread',
      pinned: LOOP_CPU !== undefined,
    },
    sizes: measured,
    micro,
  };
  const out =
    opts.out ?? join(ROOT, 'bench', 'results', `training-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  for (const size of measured)
    for (const mode of MODES) {
      const m = size.modes[mode];
      const sign = m.overhead_us >= 0 ? '+' : '';
      process.stdout.write(
        `${size.name.padEnd(7)} ${mode.padEnd(8)} median ${m.median_us.toFixed(1)} us/step  ${m.vs_none.toFixed(4)}x none  (${sign}${m.overhead_us.toFixed(1)} us)\n`,
      );
    }
  process.stdout.write(
    `micro  SDK cost per step: ${micro.float.cost_us.toFixed(2)} us (float loss), ${micro.cpu_tensor.cost_us.toFixed(2)} us (CPU tensor loss)\n`,
  );
  process.stderr.write(`wrote ${out}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
