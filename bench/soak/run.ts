/**
 * bench/soak: the fault soak at full size. 100,000 OIP v2 requests from 64 closed-loop clients
 * while a worker of the server is SIGKILLed every 2 s; every request must be answered with its
 * result or a retryable error, none may hang, and the server's RSS is sampled once a second.
 *
 *   node --import tsx bench/soak/run.ts [--requests 100000] [--concurrency 64] [--kill-every 2]
 *                                       [--instances 2] [--out FILE]
 *
 * The server serves the demo tabular model (version 1) with `resources.instances` workers, so
 * that a kill takes out one of several. 10,000 requests take about 5 s on 2 cores, two kills; the
 * default of 100,000 runs about 40 s, long enough for some twenty kills and an RSS curve that shows
 * whether memory settles. Results go to bench/results/soak-<time>.json; the
 * report renders them.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { buildDemoModels, makeVariant } from '../batching/models.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { startTensorgate, stopProcess, waitHealthy } from '../peers/harness.js';
import type { SoakFile } from './render.js';
import { runSoak } from './soak.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

const { values: opts } = parseArgs({
  options: {
    requests: { type: 'string', default: '100000' },
    concurrency: { type: 'string', default: '64' },
    'kill-every': { type: 'string', default: '2' },
    instances: { type: 'string', default: '2' },
    out: { type: 'string' },
  },
});

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'tg-soak-'));
  const demo = join(ROOT, 'models');
  buildDemoModels(ROOT, pythonExecutable(), demo);
  const variant = makeVariant('tabular', demo, join(work, 'models'), null);
  const configPath = join(variant.dir, 'config.json');
  const config = JSON.parse(readFileSync(configPath, 'utf8'));
  config.resources = { ...config.resources, instances: Number(opts.instances) };
  writeFileSync(configPath, JSON.stringify(config));

  const { child, base } = await startTensorgate(
    ROOT,
    join(work, 'models'),
    work,
    /ready: .* at (http:\/\/[\d.]+:\d+)\/mcp/,
  );
  try {
    await waitHealthy(base, `/v2/models/${variant.registered_as}/ready`);
    const body = Buffer.from(
      JSON.stringify({ inputs: [{ name: 'features', shape: [1, 4], datatype: 'FP32', data: [5.1, 3.5, 1.4, 0.2] }] }),
    );
    const settings = {
      requests: Number(opts.requests),
      concurrency: Number(opts.concurrency),
      kill_every_s: Number(opts['kill-every']),
      instances: Number(opts.instances),
    };
    const result = await runSoak({
      base,
      serverPid: child.pid as number,
      model: variant.registered_as,
      body,
      // The demo model's answer for this setosa flower, as every run gives it.
      expect: '"shape":[1,3],"data":[1,',
      total: settings.requests,
      concurrency: settings.concurrency,
      killEveryMs: settings.kill_every_s * 1000,
      deadlineMs: 60_000,
    });
    const file: SoakFile = {
      benchmark: 'soak',
      date: new Date().toISOString(),
      machine: machineInfo(ROOT),
      config: settings,
      result,
    };
    const out = opts.out ?? join(ROOT, 'bench', 'results', `soak-${file.date.replace(/[:.]/g, '-').slice(0, 19)}.json`);
    writeFileSync(out, `${JSON.stringify(file, null, 2)}\n`);
    process.stdout.write(
      `${result.requests} requests in ${result.duration_s} s, ${result.kills} workers killed: ${result.ok} ok, retryable ${JSON.stringify(result.retryable)}, other ${JSON.stringify(result.other)}, hung ${result.hung}; RSS ${result.rss_mib[0]?.[1]} -> ${result.rss_mib.at(-1)?.[1]} MiB\nwrote ${out}\n`,
    );
    if (result.hung > 0 || Object.keys(result.other).length > 0) process.exitCode = 1;
  } finally {
    await stopProcess(child);
    rmSync(work, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
