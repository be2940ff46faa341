/**
 * bench/metrics-overhead: what the Prometheus metrics and the request log cost each request, on
 * against off in one run.
 *
 *   node --import tsx bench/metrics-overhead/run.ts [--calls 2000] [--rounds 6] [--out FILE]
 *
 * One gateway in this process with its real worker serves the small tabular model (demo models
 * from models/); sequential calls of one row through `Gateway.inferTensors` (the OIP path: no
 * tensor store, no summaries, so the metrics are the largest share they can be), in blocks with
 * the metrics on and off, and with the request log at info (one JSON record per request, written
 * asynchronously to /dev/null as the server writes to stderr) and at warn (no record), interleaved
 * over rounds. Also: `recordSuccess` and one request record alone in a tight loop.
 * Results go to bench/results/metrics-overhead-<time>.json; bench/report.ts renders them.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { defaultConfig } from '../../src/config.js';
import { Gateway } from '../../src/gateway.js';
import { createLogging } from '../../src/observability/logging.js';
import { tensorSource } from '../../src/tensor/source.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { distribution, median, round } from '../mcp-overhead/stats.js';

type Mode = 'on' | 'off' | 'logged';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const { values: opts } = parseArgs({
  options: {
    calls: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '6' },
    out: { type: 'string' },
  },
});

async function main(): Promise<void> {
  const work = join(ROOT, '.tensorgate', 'bench-metrics');
  mkdirSync(work, { recursive: true });
  const config = {
    ...defaultConfig(),
    modelsDir: join(ROOT, 'models'),
    registryPath: join(work, 'registry.db'),
    runsDir: join(work, 'runs'),
    auditLogPath: join(work, 'audit.jsonl'),
  };
  const gateway = new Gateway(config);
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
  // on: metrics on, request log off; off: both off; logged: both on.
  const samples: Record<Mode, number[][]> = { on: [], off: [], logged: [] };
  for (let r = 0; r < Number(opts.rounds); r++) {
    const modes: Mode[] = ['on', 'off', 'logged'];
    for (const mode of [...modes.slice(r % 3), ...modes.slice(0, r % 3)]) {
      gateway.metrics.enabled = mode !== 'off';
      logs.pino.level = mode === 'logged' ? 'info' : 'warn';
      const ms: number[] = [];
      for (let i = 0; i < Number(opts.calls); i++) {
        const start = performance.now();
        await call();
        ms.push(performance.now() - start);
      }
      samples[mode].push(ms);
      process.stderr.write(`round ${r + 1} ${mode}: p50 ${median(ms).toFixed(4)} ms\n`);
    }
  }
  gateway.metrics.enabled = true;
  logs.pino.level = 'warn';
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
  for (let i = 0; i < n; i++) gateway.metrics.recordSuccess('tabular-classifier', '1', timings, 1, 1);
  const recordUs = ((performance.now() - start) / n) * 1000;
  logs.pino.level = 'info';
  const finished = {
    request_id: '6f1c2b9e-0a4d-4c55-9d1e-2b7f3c8a9e10',
    model: 'tabular-classifier',
    version: '1',
    adapter: 'oip-rest' as const,
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
  const result = {
    benchmark: 'metrics-overhead',
    date: new Date().toISOString(),
    profiled: false,
    machine: machineInfo(ROOT),
    config: { calls: Number(opts.calls), rounds: Number(opts.rounds) },
    on,
    off,
    overhead_us: round((on.median_of_round_p50s - off.median_of_round_p50s) * 1000, 1),
    overhead_percent: round(((on.median_of_round_p50s - off.median_of_round_p50s) / off.median_of_round_p50s) * 100, 2),
    record_success_us: round(recordUs, 2),
    logging: {
      on: logged,
      off: on,
      overhead_us: round((logged.median_of_round_p50s - on.median_of_round_p50s) * 1000, 1),
      overhead_percent: round(
        ((logged.median_of_round_p50s - on.median_of_round_p50s) / on.median_of_round_p50s) * 100,
        2,
      ),
      log_record_us: round(logRecordUs, 2),
    },
  };
  const out =
    opts.out ??
    join(ROOT, 'bench', 'results', `metrics-overhead-${result.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(
    `metrics on p50 ${on.median_of_round_p50s} ms, off ${off.median_of_round_p50s} ms: ${result.overhead_us} us (${result.overhead_percent}%); recordSuccess alone ${result.record_success_us} us\n` +
      `request log on p50 ${logged.median_of_round_p50s} ms, off ${on.median_of_round_p50s} ms: ${result.logging.overhead_us} us (${result.logging.overhead_percent}%); one record alone ${result.logging.log_record_us} us\n`,
  );
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
