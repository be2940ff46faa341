import { readdirSync, readFileSync } from 'node:fs';

/** CPU time of processes from /proc: a serving gateway's own, and its children's (the workers). */

/** Clock ticks per second of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux). */
const TICKS_PER_S = 100;

/** CPU ms a process has used, and its children (the workers) separately. */
export function cpuMs(pid: number): { self: number; children: number } {
  const children = readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map((d) => procStat(Number(d)))
    .filter((s) => s !== undefined && s.ppid === pid);
  const self = procStat(pid);
  return {
    self: self ? self.cpuMs : 0,
    children: children.reduce((sum, s) => sum + (s?.cpuMs ?? 0), 0),
  };
}

/**
 * CPU ms of one thread of a process; by default its main thread, which for a Node process is the
 * JavaScript thread: every request a gateway serves passes through it, so its CPU per call bounds
 * the calls per second one gateway can answer, however many cores the host has.
 */
export function threadCpuMs(pid: number, tid = pid): number {
  return procStat(pid, `/proc/${pid}/task/${tid}/stat`)?.cpuMs ?? 0;
}

function procStat(pid: number, path = `/proc/${pid}/stat`): { ppid: number; cpuMs: number } | undefined {
  try {
    const text = readFileSync(path, 'utf8');
    // The command may hold spaces and parentheses: fields start after the last ')'.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return { ppid: Number(fields[1]), cpuMs: (ticks / TICKS_PER_S) * 1000 };
  } catch {
    return undefined; // gone meanwhile
  }
}
