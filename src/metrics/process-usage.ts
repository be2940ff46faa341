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

/**
 * Proportional set size of one process (/proc/PID/smaps_rollup): its private pages plus its
 * share of each page it shares, so that the sum over processes is the memory they hold together.
 * Resident memory counts a shared page whole in every process, which overstates forked workers,
 * whose torch pages are their fork server's. Undefined when the process is gone.
 */
export function proportionalBytes(pid: number): number | undefined {
  try {
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'latin1');
    const kb = /^Pss:\s+(\d+) kB/m.exec(rollup)?.[1];
    return kb === undefined ? undefined : Number(kb) * 1024;
  } catch {
    return undefined;
  }
}
