import { readdirSync, readFileSync } from 'node:fs';
import { expandCpuList } from '../../src/registry/model-config.js';

interface ProcessEntry {
  pid: number;
  ppid: number;
  comm: string;
  cmdline: string;
}

function processes(): ProcessEntry[] {
  const found: ProcessEntry[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      found.push({
        pid: Number(entry),
        ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]),
        comm: readFileSync(`/proc/${entry}/comm`, 'utf8').trim(),
        cmdline: readFileSync(`/proc/${entry}/cmdline`, 'utf8'),
      });
    } catch {
      // The process ended while we looked.
    }
  }
  return found;
}

/**
 * PIDs of the tensorgate workers this process started: spawned ones are its children, forked ones
 * children of its fork servers. A worker names itself `tg-worker` once it runs (worker.py).
 */
export function workerPids(parent = process.pid): number[] {
  const all = processes();
  const forkServers = new Set(
    all.filter((p) => p.ppid === parent && p.cmdline.includes('tensorgate.forkserver')).map((p) => p.pid),
  );
  return all.filter((p) => (p.ppid === parent || forkServers.has(p.ppid)) && p.comm === 'tg-worker').map((p) => p.pid);
}

/** PIDs of this process's fork servers (`python -m tensorgate.forkserver`). */
export function forkServerPids(parent = process.pid): number[] {
  return processes()
    .filter((p) => p.ppid === parent && p.cmdline.includes('tensorgate.forkserver'))
    .map((p) => p.pid);
}

/** The state letter of a process in /proc/PID/stat: R running or runnable, S sleeping, ... */
export function processState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

/** The CPUs each thread of a process may run on (its affinity), one sorted list per thread. */
export function threadCpus(pid: number): number[][] {
  return readdirSync(`/proc/${pid}/task`).map((tid) => {
    const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
    return expandCpuList(/^Cpus_allowed_list:\s*(\S+)$/m.exec(status)?.[1] ?? '') ?? [];
  });
}
