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

function procStat(pid: number): { ppid: number; cpuMs: number } | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command may hold spaces and parentheses: fields start after the last ')'.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return { ppid: Number(fields[1]), cpuMs: (ticks / TICKS_PER_S) * 1000 };
  } catch {
    return undefined; // gone meanwhile
  }
}
