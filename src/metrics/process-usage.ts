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

/** What /proc/PID/smaps_rollup says of one process's memory. */
export interface MemoryRollup {
  /**
   * Proportional set size: its private pages plus its share of each page it shares, so that the
   * sum over processes is the memory they hold together. Resident memory counts a shared page
   * whole in every process, which overstates forked workers, whose torch pages are their fork
   * server's.
   */
  pssBytes: number;
  /** Pages no other process maps (clean and dirty). */
  privateBytes: number;
}

/** Undefined when the process is gone (or /proc is not there). */
export function memoryRollup(pid: number): MemoryRollup | undefined {
  try {
    const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'latin1');
    const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(rollup)?.[1] ?? 0) * 1024;
    return { pssBytes: kb('Pss'), privateBytes: kb('Private_Clean') + kb('Private_Dirty') };
  } catch {
    return undefined;
  }
}
