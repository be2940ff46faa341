import { readdirSync, readFileSync } from 'node:fs';
import { cpus } from 'node:os';

/**
 * How busy the machine was with work that is not ours. On a shared 2-core box another process
 * running a test suite moves p50s by milliseconds, so every measured block records the CPU time
 * used by processes outside this benchmark's process tree (from /proc), and the run waits for a
 * quiet machine before it starts. Linux only; elsewhere it reports nothing.
 */

export interface CpuSnapshot {
  at: number;
  totalBusy: number;
  ourBusy: number;
}

function readTicks(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

function totalBusyTicks(): number {
  const line = readTicks('/proc/stat')?.split('\n')[0] ?? '';
  const [, user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).map(Number);
  return (user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0) + (steal ?? 0);
}

/** CPU ticks (utime + stime) of this process and all its live descendants. */
function ourBusyTicks(): number {
  const parent = new Map<number, number>();
  const ticks = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readTicks(`/proc/${name}/stat`);
    if (!stat) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    parent.set(Number(name), Number(fields[1]));
    ticks.set(Number(name), Number(fields[11]) + Number(fields[12]));
  }
  let sum = 0;
  for (const [pid, t] of ticks) {
    for (let p: number | undefined = pid; p !== undefined && p > 1; p = parent.get(p)) {
      if (p === process.pid) {
        sum += t;
        break;
      }
    }
  }
  return sum;
}

export function cpuSnapshot(): CpuSnapshot | undefined {
  if (process.platform !== 'linux') return undefined;
  return { at: performance.now(), totalBusy: totalBusyTicks(), ourBusy: ourBusyTicks() };
}

/** Blocks shorter than this are not judged: /proc counts CPU time in 10 ms ticks. */
export const MIN_JUDGED_MS = 300;

/**
 * Share (0..1) of the machine's CPU capacity used by other processes between two snapshots;
 * undefined when they are too close together for tick-based accounting to mean anything.
 */
export function foreignLoad(a: CpuSnapshot | undefined, b: CpuSnapshot | undefined): number | undefined {
  if (!a || !b || b.at - a.at < MIN_JUDGED_MS) return undefined;
  const ticksPerMs = 100 / 1000; // USER_HZ is 100 on Linux
  const capacity = (b.at - a.at) * ticksPerMs * cpus().length;
  const foreign = b.totalBusy - a.totalBusy - (b.ourBusy - a.ourBusy);
  return Math.max(0, Math.min(1, foreign / capacity));
}

/** Waits (up to `timeoutMs`) until other processes use less than `threshold` of the CPUs for 2 s. */
export async function waitForQuiet(
  timeoutMs: number,
  threshold: number,
  log: (s: string) => void,
): Promise<number | undefined> {
  if (process.platform !== 'linux' || timeoutMs <= 0) return undefined;
  const deadline = Date.now() + timeoutMs;
  let quietFor = 0;
  let last: number | undefined;
  let warned = false;
  while (Date.now() < deadline) {
    const a = cpuSnapshot();
    await new Promise((r) => setTimeout(r, 1000));
    last = foreignLoad(a, cpuSnapshot());
    if (last !== undefined && last < threshold) {
      if (++quietFor >= 2) return last;
    } else {
      quietFor = 0;
      if (!warned)
        log(
          `machine busy (${Math.round((last ?? 0) * 100)}% CPU used by other processes); waiting up to ${Math.round(timeoutMs / 1000)} s`,
        );
      warned = true;
    }
  }
  log(
    `machine still busy (${Math.round((last ?? 0) * 100)}% CPU by others); measuring anyway, see foreign_cpu in the results`,
  );
  return last;
}
