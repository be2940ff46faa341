import { readdirSync, readFileSync } from 'node:fs';

/** CPU time of processes from /proc: a serving gateway's own, and its descendants' (the workers). */

/** Clock ticks per second of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux). */
const TICKS_PER_S = 100;

/**
 * CPU ms a process has used, and its descendants' (the workers) separately: a forked worker is a
 * child of the gateway's fork server, not of the gateway.
 */
export function cpuMs(pid: number): { self: number; children: number } {
  const all = readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .flatMap((d) => {
      const stat = procStat(Number(d));
      return stat ? [{ pid: Number(d), ...stat }] : [];
    });
  const below = new Set([pid]);
  // Parents come before their children in pid order except after pid wrap-around: repeat until stable.
  for (let grew = true; grew; ) {
    grew = false;
    for (const p of all)
      if (!below.has(p.pid) && below.has(p.ppid)) {
        below.add(p.pid);
        grew = true;
      }
  }
  const self = all.find((p) => p.pid === pid);
  return {
    self: self ? self.cpuMs : 0,
    children: all.reduce((sum, p) => sum + (p.pid !== pid && below.has(p.pid) ? p.cpuMs : 0), 0),
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
