import { readFileSync } from 'node:fs';

/** Resident memory and CPU time of one process, from /proc (Linux). */
export interface ProcessUsage {
  rssBytes: number;
  cpuSeconds: number;
}

const CLOCK_TICKS = 100;
const PAGE_SIZE = 4096;

/** Undefined when the process is gone (or /proc is not there). */
export function processUsage(pid: number): ProcessUsage | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    // Fields after the command name, which is in parentheses and may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return {
      cpuSeconds: (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS,
      rssBytes: Number(fields[21]) * PAGE_SIZE,
    };
  } catch {
    return undefined;
  }
}
