/**
 * How fast workers start and come back, and what they hold, spawned against forked from a fork
 * server (docs/worker-protocol.md#fork-server), measured in one run.
 *
 *   node --import tsx bench/worker-start/run.ts [--instances 4] [--out FILE]
 *
 * For each way of starting (`TENSORGATE_WORKER_START`), a fresh in-process gateway registers the
 * tabular demo model with `--instances` instances (its time to ready includes starting the fork
 * server), reads the CPU time and memory (PSS and private, /proc/PID/smaps_rollup) of its worker
 * processes, then kills each worker in turn and times until the model answers again. Writes
 * bench/results/worker-start-<time>.json (or --out FILE); bench/report.ts renders it.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { defaultConfig } from '../../src/config.js';
import { forkServerPids } from '../../src/engines/torch/fork-server.js';
import { Gateway } from '../../src/gateway.js';
import { ProcessMemory } from '../../src/metrics/process-memory.js';
import { processUsage } from '../../src/metrics/process-usage.js';
import { ensureTestModels } from '../../test/helpers/models.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { median, round } from '../mcp-overhead/stats.js';
import type { WorkerStartMode, WorkerStartResult, WorkerStartRow } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const { values: opts } = parseArgs({
  options: {
    instances: { type: 'string', default: '4' },
    out: { type: 'string' },
  },
});
const instances = Number(opts.instances);
const MODEL = 'tabular-classifier';
const INPUTS = { features: [[5.1, 3.5, 1.4, 0.2]] };
interface Usage {
  cpu_s: number;
  pss_mb: number;
  private_mb: number;
}

/** CPU time and memory of these processes, summed (memory read afresh: no reading is reused). */
async function usage(pids: number[]): Promise<Usage> {
  let cpu = 0;
  let pss = 0;
  let own = 0;
  const memory = new ProcessMemory(0);
  const rollups = await memory.rollups(pids);
  await memory.close();
  for (const pid of pids) {
    cpu += processUsage(pid)?.cpuSeconds ?? 0;
    const rollup = rollups.get(pid);
    pss += rollup?.pssBytes ?? 0;
    own += rollup?.privateBytes ?? 0;
  }
  const mb = (bytes: number) => round(bytes / 2 ** 20, 1);
  return { cpu_s: round(cpu, 2), pss_mb: mb(pss), private_mb: mb(own) };
}

async function measure(mode: WorkerStartMode, modelDir: string): Promise<WorkerStartRow> {
  process.env.TENSORGATE_WORKER_START = mode;
  const work = mkdtempSync(join(tmpdir(), `tg-worker-start-${mode}-`));
  const gateway = await Gateway.open({
    ...defaultConfig(work),
    registry: join(work, 'r.db'),
    modelsDir: join(work, 'none'),
  });
  try {
    const t0 = performance.now();
    await gateway.register(modelDir);
    const readyMs = performance.now() - t0;
    const pids = gateway.poolStats(MODEL, '1')?.pids ?? [];
    if (pids.length !== instances) throw new Error(`${pids.length} workers, not ${instances}`);
    const servers = mode === 'fork' ? forkServerPids() : [];
    const all = await usage([...pids, ...servers]);
    const restarts: number[] = [];
    for (const pid of pids) {
      const t = performance.now();
      process.kill(pid, 'SIGKILL');
      // Each instance in turn: wait until this one is back (no pid of before is left in the pool).
      for (;;) {
        const now = gateway.poolStats(MODEL, '1')?.pids ?? [];
        if (!now.includes(pid) && now.length === instances) {
          try {
            await gateway.infer({ model: MODEL, inputs: INPUTS });
            break;
          } catch {
            // WORKER_CRASHED while it restarts
          }
        }
        await new Promise((r) => setTimeout(r, 2));
      }
      restarts.push(performance.now() - t);
    }
    return {
      mode,
      ready_ms: round(readyMs, 1),
      restart_p50_ms: round(median(restarts), 1),
      restart_max_ms: round(Math.max(...restarts), 1),
      ...all,
      ...(servers.length ? { fork_server: await usage(servers) } : {}),
    };
  } finally {
    await gateway.close();
    rmSync(work, { recursive: true, force: true });
  }
}

const started = performance.now();
const models = ensureTestModels();
const modelDir = join(mkdtempSync(join(tmpdir(), 'tg-worker-start-model-')), MODEL);
cpSync(join(models, MODEL), modelDir, { recursive: true });
const config = JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8'));
config.resources = { ...config.resources, instances, threads: 1 };
writeFileSync(join(modelDir, 'config.json'), JSON.stringify(config));

const rows = [await measure('spawn', modelDir), await measure('fork', modelDir)];
const [spawned, forked] = rows as [WorkerStartRow, WorkerStartRow];
console.log(`${MODEL}, ${instances} instances, one run:`);
console.log('mode   ready ms  restart p50 ms  max ms  CPU s  PSS MB  private MB');
for (const r of rows) {
  console.log(
    `${r.mode.padEnd(6)} ${String(r.ready_ms).padStart(8)} ${String(r.restart_p50_ms).padStart(15)} ` +
      `${String(r.restart_max_ms).padStart(7)} ${String(r.cpu_s).padStart(6)} ${String(r.pss_mb).padStart(7)} ` +
      `${String(r.private_mb).padStart(11)}`,
  );
}
const x = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
console.log(
  `fork vs spawn: ready ${x(forked.ready_ms, spawned.ready_ms)}, restart p50 ${x(forked.restart_p50_ms, spawned.restart_p50_ms)}, ` +
    `CPU ${x(forked.cpu_s, spawned.cpu_s)}, PSS ${x(forked.pss_mb, spawned.pss_mb)}, private ${x(forked.private_mb, spawned.private_mb)}`,
);

const result: WorkerStartResult = {
  benchmark: 'worker-start',
  date: new Date().toISOString(),
  profiled: false,
  machine: machineInfo(ROOT),
  config: { model: MODEL, instances, wall_s: round((performance.now() - started) / 1000, 1) },
  rows,
};
const out =
  opts.out ?? join(ROOT, 'bench', 'results', `worker-start-${result.date.slice(0, 19).replace(/:/g, '-')}.json`);
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
console.log(`wrote ${out}`);
rmSync(dirname(modelDir), { recursive: true, force: true });
