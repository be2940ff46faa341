import { execFileSync } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { expandCpuList } from '../../src/registry/model-config.js';

/**
 * CPU placement for bench/fixed-cost's `@placed` scenarios: the model's worker on a CPU of its own
 * (`resources.cpus`), and the gateway with the benchmark's client on another, as an operator
 * dedicates cores on a serving host (docs/architecture.md#cpu-placement). On a 2-core machine the
 * client has to sit somewhere: it shares the gateway's core, as a remote client would share none
 * of the worker's.
 */
export interface Placement {
  /** The CPU of the gateway and the client. */
  gateway: number;
  /** The CPU of the model's worker, and of the raw baseline measured beside it. */
  worker: number;
  /** This process's CPUs before any placement, to go back to after a placed block. */
  own: string;
}

/** The CPUs this process may run on, as /proc writes them ("0-1"). */
function ownCpus(): string {
  return /^Cpus_allowed_list:\s*(\S+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '';
}

/** The placement, or why there is none here (not Linux, one CPU, no taskset). */
export function findPlacement(): Placement | string {
  if (process.platform !== 'linux') return 'CPU placement is measured on Linux';
  const own = ownCpus();
  const cpus = expandCpuList(own) ?? [];
  if (cpus.length < 2) return `one CPU (${own}) cannot be split between the worker and the gateway`;
  try {
    execFileSync('taskset', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'taskset (util-linux) is not installed';
  }
  return { gateway: cpus[0] as number, worker: cpus.at(-1) as number, own };
}

/** Runs every thread of process `pid` on `cpus` (a CPU list) from now on. */
export function pin(pid: number, cpus: string | number): void {
  execFileSync('taskset', ['-a', '-p', '-c', String(cpus), String(pid)], { stdio: 'ignore' });
}

/**
 * A repository at `repo` holding the model folder `modelDir` alone, placed on `cpu` by
 * `resources.cpus`, its name kept, so that the placed gateways take the same calls.
 */
export function placedRepo(modelDir: string, repo: string, cpu: number): string {
  const dir = join(repo, basename(modelDir));
  cpSync(modelDir, dir, { recursive: true });
  const file = join(dir, 'config.json');
  const config = JSON.parse(readFileSync(file, 'utf8')) as { resources: Record<string, unknown> };
  config.resources.cpus = [cpu];
  writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`);
  return repo;
}
