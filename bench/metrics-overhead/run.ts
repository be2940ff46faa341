/**
 * bench/metrics-overhead: what the Prometheus metrics and the request log cost each request, on
 * against off in one run.
 *
 *   node --import tsx bench/metrics-overhead/run.ts [--calls 300] [--rounds 30] [--out FILE]
 *
 * One gateway in this process with its real worker serves the small tabular model (demo models
 * from models/); sequential calls of one row through `Gateway.inferTensors` (the OIP path: no
 * tensor store, no summaries, so the metrics are the largest share they can be). Two phases of
 * interleaved blocks: metrics (Prometheus and the recent-request window) on against off, then the
 * request log at info (one JSON record per request, written asynchronously to /dev/null as the
 * server writes to stderr) against warn (no record). Short blocks, many rounds, and the overhead
 * taken as the median of each round's paired difference: the machine's drift between blocks
 * (0.1-0.3 ms on a shared VM) then cancels. Each block also records this process's CPU time per
 * call. Also: `recordSuccess`, a window record and one request record alone in a tight loop.
 * Results go to bench/results/metrics-overhead-<time>.json; bench/report.ts renders them.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { defaultConfig } from '../../src/config.js';
import { forkServerPids } from '../../src/engines/torch/fork-server.js';
import { Gateway } from '../../src/gateway.js';
import { CommandShell } from '../../src/metrics/command-shell.js';
import { GPU_QUERY } from '../../src/metrics/gpu.js';
import { createLogging } from '../../src/observability/logging.js';
import { tensorSource } from '../../src/tensor/source.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, median, round } from '../mcp-overhead/stats.js';

type Mode = 'on' | 'off' | 'logged' | 'unlogged';
/** Scrapes measured, each with its calls (about 2.3 s apiece: the readings' age limit twice). */
const SCRAPES = 15;
/** nvidia-smi runs measured each way. */
const SAMPLES = 40;

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const { values: opts } = parseArgs({
  options: {
    calls: { type: 'string', default: '300' },
    rounds: { type: 'string', default: '30' },
    out: { type: 'string' },
  },
});

async function main(): Promise<void> {
  const work = join(ROOT, '.tensorgate', 'bench-metrics');
  mkdirSync(work, { recursive: true });
  const config = {
    ...defaultConfig(),
    modelsDir: join(ROOT, 'models'),
    registry: join(work, 'registry.db'),
    runsDir: join(work, 'runs'),
    auditLogPath: join(work, 'audit.jsonl'),
  };
  const gateway = await Gateway.open(config);
  await gateway.loadAll();
  // Attached throughout; `--log-level warn` (the level above the request record) is "off".
  const logs = createLogging({ dest: '/dev/null', level: 'warn', sync: false });
  gateway.observe(logs.requests);
  const data = new Uint8Array(new Float32Array([5.1, 3.5, 1.4, 0.2]).buffer);
  const call = () =>
    gateway.inferTensors({
      model: 'tabular-classifier',
      inputs: new Map([['features', tensorSource({ dtype: 'float32', shape: [1, 4], data })]]),
      form: 'binary',
    });
  for (let i = 0; i < 500; i++) await call();
  // Two comparisons, each its own phase of rounds so that one's garbage never lands in the other's
  // blocks: metrics on against off (request log off), then the request log on against off
  // (metrics on). Within a round the two blocks swap order every other round.
  const samples: Record<Mode, number[][]> = { on: [], off: [], logged: [], unlogged: [] };
  /** This process's CPU time per call in each block (µs): the work added, without the wait for the worker. */
  const cpu: Record<Mode, number[]> = { on: [], off: [], logged: [], unlogged: [] };
  const phases: [Mode, Mode][] = [
    ['on', 'off'],
    ['logged', 'unlogged'],
  ];
  for (const pair of phases) {
    for (let r = 0; r < Number(opts.rounds); r++) {
      for (const mode of r % 2 ? [...pair].reverse() : pair) {
        gateway.metrics.enabled = mode !== 'off';
        logs.pino.level = mode === 'logged' ? 'info' : 'warn';
        const ms: number[] = [];
        const cpuStart = process.cpuUsage();
        for (let i = 0; i < Number(opts.calls); i++) {
          const start = performance.now();
          await call();
          ms.push(performance.now() - start);
        }
        const used = process.cpuUsage(cpuStart);
        cpu[mode].push((used.user + used.system) / Number(opts.calls));
        samples[mode].push(ms);
        process.stderr.write(`round ${r + 1} ${mode}: p50 ${median(ms).toFixed(4)} ms\n`);
      }
    }
  }
  gateway.metrics.enabled = true;
  logs.pino.level = 'warn';
  const scrape = await scrapes(gateway, call);
  const gpuSampling = await nvidiaSmiRuns(call);
  const timings = {
    decode_ms: 0.01,
    queue_ms: 0.02,
    transfer_ms: 0.3,
    compute_ms: 0.05,
    encode_ms: 0.01,
    total_ms: 0.4,
  };
  const n = 200_000;
  const start = performance.now();
  for (let i = 0; i < n; i++) gateway.metrics.recordSuccess('tabular-classifier', '1', 'torch-fp32', timings, 1, 1);
  const recordUs = ((performance.now() - start) / n) * 1000;
  const windowStart = performance.now();
  for (let i = 0; i < n; i++) gateway.window.recordSuccess('tabular-classifier', '1', 'bench', timings, 1, 1, 'binary');
  const windowRecordUs = ((performance.now() - windowStart) / n) * 1000;
  logs.pino.level = 'info';
  const finished = {
    request_id: '6f1c2b9e-0a4d-4c55-9d1e-2b7f3c8a9e10',
    model: 'tabular-classifier',
    version: '1',
    adapter: 'oip-rest' as const,
    variant: 'torch-fp32',
    batch_size: 1,
    rows: 1,
    timings,
    startedAt: 0,
    decodeStartedAt: 0,
    encodeStartedAt: 0,
    endedAt: 0,
  };
  const logStart = performance.now();
  for (let i = 0; i < n; i++) {
    logs.requests.finished(finished);
    // Let the asynchronous writes drain now and then, as the event loop does between requests.
    if (i % 1000 === 999) await new Promise((r) => setImmediate(r));
  }
  const logRecordUs = ((performance.now() - logStart) / n) * 1000;
  await logs.close();
  await gateway.close();

  const summary = (mode: Mode) => ({
    ...distribution(samples[mode].flat()),
    round_p50s: samples[mode].map((ms) => round(median(ms))),
    median_of_round_p50s: round(median(samples[mode].map((ms) => median(ms)))),
  });
  const on = summary('on');
  const off = summary('off');
  const logged = summary('logged');
  const unlogged = summary('unlogged');
  // Each round measures every mode back to back: the median of the rounds' differences cancels the
  // machine's drift between rounds, which a difference of two medians would keep.
  const paired = (a: Mode, b: Mode) => {
    const diffs = samples[a].map((ms, r) => median(ms) - median(samples[b][r] as number[]));
    const us = median(diffs) * 1000;
    const cpuUs = median(cpu[a].map((x, r) => x - (cpu[b][r] as number)));
    return {
      overhead_us: round(us, 1),
      overhead_percent: round((us / 1000 / median(samples[b].flat())) * 100, 2),
      cpu_us_per_call: { with: round(median(cpu[a]), 1), without: round(median(cpu[b]), 1) },
      cpu_overhead_us: round(cpuUs, 1),
      cpu_overhead_percent: round((cpuUs / median(cpu[b])) * 100, 2),
    };
  };
  const result = {
    benchmark: 'metrics-overhead',
    date: new Date().toISOString(),
    profiled: false,
    machine: machineInfo(ROOT),
    config: { calls: Number(opts.calls), rounds: Number(opts.rounds) },
    on,
    off,
    ...paired('on', 'off'),
    record_success_us: round(recordUs, 2),
    window_record_us: round(windowRecordUs, 3),
    logging: {
      on: logged,
      off: unlogged,
      ...paired('logged', 'unlogged'),
      log_record_us: round(logRecordUs, 2),
    },
    scrape,
    gpu_sampling: gpuSampling,
  };
  const out =
    opts.out ??
    join(ROOT, 'bench', 'results', `metrics-overhead-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(
    `metrics on p50 ${on.median_of_round_p50s} ms, off ${off.median_of_round_p50s} ms: ${result.overhead_us} us (${result.overhead_percent}%) latency, ${result.cpu_overhead_us} us (${result.cpu_overhead_percent}%) CPU; recordSuccess alone ${result.record_success_us} us\n` +
      `request log on p50 ${logged.median_of_round_p50s} ms, off ${unlogged.median_of_round_p50s} ms: ${result.logging.overhead_us} us (${result.logging.overhead_percent}%) latency, ${result.logging.cpu_overhead_us} us (${result.logging.cpu_overhead_percent}%) CPU; one record alone ${result.logging.log_record_us} us\n`,
  );
}

/**
 * What a /metrics scrape costs the calls it overlaps: for each of SCRAPES rounds, a call alone, a
 * scrape alone, and a call in flight when a scrape begins; how long a timer set as the scrape
 * begins waits for the event loop; and, for scale, reading every worker's and fork server's
 * /proc/PID/smaps_rollup synchronously on this thread, as scrapes did before
 * src/metrics/process-memory.ts.
 */
async function scrapes(gateway: Gateway, call: () => Promise<unknown>) {
  const pids = [
    ...gateway.listModels().flatMap((m) => m.versions.flatMap((v) => v.stats?.pids ?? [])),
    ...forkServerPids(),
  ];
  const alone: number[] = [];
  const during: number[] = [];
  const scrapeMs: number[] = [];
  const loopWait: number[] = [];
  const syncRead: number[] = [];
  const timed = async (work: () => Promise<unknown>) => {
    const start = performance.now();
    await work();
    return performance.now() - start;
  };
  for (let i = 0; i < SCRAPES; i++) {
    alone.push(await timed(call));
    scrapeMs.push(await timed(() => gateway.metrics.render()));
    // Past the readings' age limit (1 s), so that each scrape reads /proc afresh.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    // A call in flight when the scrape begins: its answer is handled once the event loop is free.
    const calling = timed(call);
    const start = performance.now();
    const rendered = gateway.metrics.render();
    const ticked = new Promise<void>((resolve) =>
      setTimeout(() => {
        loopWait.push(performance.now() - start);
        resolve();
      }, 0),
    );
    during.push(await calling);
    await Promise.all([rendered, ticked]);
    const readStart = performance.now();
    for (const pid of pids) readFileSync(`/proc/${pid}/smaps_rollup`, 'latin1');
    syncRead.push(performance.now() - readStart);
    await new Promise((resolve) => setTimeout(resolve, 1100));
  }
  const result = {
    scrapes: SCRAPES,
    processes_read: pids.length,
    call_alone_ms: distribution(alone),
    call_during_scrape_ms: distribution(during),
    scrape_ms: distribution(scrapeMs),
    loop_wait_ms: distribution(loopWait),
    sync_rollup_read_ms: distribution(syncRead),
  };
  process.stderr.write(
    `scrape: call alone p50 ${result.call_alone_ms.p50} ms, during a scrape ${result.call_during_scrape_ms.p50} ms; loop waits ${result.loop_wait_ms.p50} ms; reading ${pids.length} rollups on this thread ${result.sync_rollup_read_ms.p50} ms\n`,
  );
  return result;
}

/**
 * What running nvidia-smi costs the calls it overlaps (the GPU sampler runs it twice every 5 s on
 * a GPU host): a stand-in script answering its query as nvidia-smi does, run SAMPLES times each way
 * with a call in flight, started directly by execFile (a fork of this process: what the sampler
 * did before src/metrics/command-shell.ts) and through the sampler's long-lived shell. Each run
 * also times how long a timer set as it begins waits for the event loop.
 */
async function nvidiaSmiRuns(call: () => Promise<unknown>) {
  const dir = mkdtempSync(join(tmpdir(), 'tg-bench-smi-'));
  const tool = join(dir, 'nvidia-smi');
  writeFileSync(tool, "#!/bin/sh\nprintf '0, NVIDIA H200, 37, 20480, 143771\\n'\n");
  chmodSync(tool, 0o755);
  const shell = new CommandShell();
  const ways = {
    exec_file: () =>
      new Promise<string>((resolve, reject) =>
        execFile(tool, GPU_QUERY, { encoding: 'utf8' }, (err, out) => (err ? reject(err) : resolve(out))),
      ),
    shell: () => shell.run([tool, ...GPU_QUERY]),
  };
  const alone: number[] = [];
  const during = { exec_file: [] as number[], shell: [] as number[] };
  const loopWait = { exec_file: [] as number[], shell: [] as number[] };
  await shell.run([tool, ...GPU_QUERY]); // the shell started (the one fork), as the sampler's first sample does
  for (let i = 0; i < SAMPLES; i++) {
    for (const way of ['exec_file', 'shell'] as const) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      const start = performance.now();
      const calling = call().then(() => performance.now() - start);
      const running = ways[way]();
      const ticked = new Promise<void>((resolve) =>
        setTimeout(() => {
          loopWait[way].push(performance.now() - start);
          resolve();
        }, 0),
      );
      during[way].push(await calling);
      await Promise.all([running, ticked]);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    const start = performance.now();
    await call();
    alone.push(performance.now() - start);
  }
  shell.close();
  const result = {
    samples: SAMPLES,
    rss_mb: round(process.memoryUsage().rss / 2 ** 20, 0),
    call_alone_ms: distribution(alone),
    call_during_exec_file_ms: distribution(during.exec_file),
    call_during_shell_ms: distribution(during.shell),
    loop_wait_exec_file_ms: distribution(loopWait.exec_file),
    loop_wait_shell_ms: distribution(loopWait.shell),
  };
  process.stderr.write(
    `nvidia-smi (RSS ${result.rss_mb} MB): call alone p50 ${result.call_alone_ms.p50} ms; during execFile ${result.call_during_exec_file_ms.p50} ms (loop waits ${result.loop_wait_exec_file_ms.p50}), during the shell's run ${result.call_during_shell_ms.p50} ms (loop waits ${result.loop_wait_shell_ms.p50})\n`,
  );
  return result;
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
