import { readdirSync, readFileSync } from 'node:fs';
import { expandCpuList } from '../../src/registry/model-config.js';

/** PIDs of the tensorgate workers that are children of this process. */
export function workerPids(parent = process.pid): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (ppid === parent && cmdline.includes('tensorgate.worker')) pids.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return pids;
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
