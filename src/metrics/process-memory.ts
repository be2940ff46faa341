import { close, open, read } from 'node:fs';

/**
 * The proportional memory of processes (the workers, their fork servers), read from
 * /proc/PID/smaps_rollup off the main thread.
 *
 * The kernel builds that file when it is read, by walking every mapping of the process: about
 * 2 ms for a torch worker on a 2-core VM, more for a CUDA worker with its large mappings. Read
 * with readFileSync, a /metrics scrape of a gateway with three workers and their fork server held
 * the event loop for 12-15 ms, and every request in flight waited that long
 * (bench/metrics-overhead). Read through libuv's thread pool, the walk runs beside the event
 * loop; at most two at a time, so that the pool keeps threads for the file I/O of requests and
 * logs. A reading answers whatever asks for that process within `maxAgeMs` (a scrape, a dashboard
 * tick and `get_metrics` close together read once), and asks for a process whose reading is under
 * way wait for that reading.
 *
 * Each process's file is opened once and read again from its start (the kernel builds it anew on
 * each read from offset 0): one read through the pool per reading, into a buffer kept for it,
 * where fs/promises' readFile took five (open, fstat, two reads, close) and a fresh 64 KiB buffer,
 * 0.04-0.2 ms of the main thread per process against 0.01 ms. A descriptor stays tied to the process it was opened
 * for, never to a later one given the same pid: once that process has exited, reads come back
 * empty and the file is closed. A file not asked for in `keepMs` is closed too.
 */

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

/** Parses the text of /proc/PID/smaps_rollup (fields in kB). */
export function parseRollup(text: string): MemoryRollup {
  const kb = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return { pssBytes: kb('Pss'), privateBytes: kb('Private_Clean') + kb('Private_Dirty') };
}

interface Reading {
  /** When the reading began (performance.now()). */
  at: number;
  /** Undefined when the process is gone (or /proc is not there). */
  rollup: Promise<MemoryRollup | undefined>;
}

/** One process's smaps_rollup, open. */
interface RollupFile {
  fd: number;
  buffer: Buffer;
  /** When it was last asked for (performance.now()). */
  asked: number;
}

/** smaps_rollup is under 1 KiB on Linux 6; a larger one grows the buffer. */
const BUFFER_BYTES = 4096;

export class ProcessMemory {
  private readonly readings = new Map<number, Reading>();
  private readonly files = new Map<number, Promise<RollupFile>>();
  private running = 0;
  private readonly queued: (() => void)[] = [];

  constructor(
    private readonly maxAgeMs = 1000,
    private readonly root = '/proc',
    private readonly lanes = 2,
    private readonly keepMs = 60_000,
  ) {}

  /** The rollup of each of `pids` still there, by pid. */
  async rollups(pids: Iterable<number>): Promise<Map<number, MemoryRollup>> {
    const now = performance.now();
    for (const [pid, reading] of this.readings) if (now - reading.at > this.maxAgeMs) this.readings.delete(pid);
    const wanted = [...new Set(pids)];
    const rollups = await Promise.all(wanted.map((pid) => this.reading(pid, now).rollup));
    const out = new Map<number, MemoryRollup>();
    wanted.forEach((pid, i) => {
      const rollup = rollups[i];
      if (rollup) out.set(pid, rollup);
    });
    this.closeUnasked(now);
    return out;
  }

  /** Closes every file kept open. */
  async close(): Promise<void> {
    const files = [...this.files.keys()];
    await Promise.all(files.map((pid) => this.closeFile(pid)));
    this.readings.clear();
  }

  private reading(pid: number, now: number): Reading {
    let reading = this.readings.get(pid);
    if (!reading) {
      reading = { at: now, rollup: this.read(pid, now) };
      this.readings.set(pid, reading);
    }
    return reading;
  }

  private async read(pid: number, now: number): Promise<MemoryRollup | undefined> {
    await this.lane();
    try {
      let file = this.files.get(pid);
      if (!file) {
        file = openRollup(`${this.root}/${pid}/smaps_rollup`);
        this.files.set(pid, file);
      }
      const opened = await file;
      opened.asked = now;
      let length = await readAt0(opened.fd, opened.buffer);
      while (length === opened.buffer.length) {
        opened.buffer = Buffer.allocUnsafe(opened.buffer.length * 2);
        length = await readAt0(opened.fd, opened.buffer);
      }
      if (length === 0) {
        // The process has exited: its file reads empty from now on.
        await this.closeFile(pid);
        return undefined;
      }
      return parseRollup(opened.buffer.toString('latin1', 0, length));
    } catch {
      await this.closeFile(pid);
      return undefined;
    } finally {
      this.release();
    }
  }

  private closeUnasked(now: number): void {
    for (const [pid, file] of this.files)
      file.then(
        (opened) => {
          if (now - opened.asked > this.keepMs && this.files.get(pid) === file) void this.closeFile(pid);
        },
        () => {}, // a failed open: its reading removes it
      );
  }

  private async closeFile(pid: number): Promise<void> {
    const file = this.files.get(pid);
    if (!file) return;
    this.files.delete(pid);
    const opened = await file.catch(() => undefined);
    if (opened) await new Promise<void>((resolve) => close(opened.fd, () => resolve()));
  }

  private lane(): Promise<void> | undefined {
    if (this.running < this.lanes) {
      this.running++;
      return undefined;
    }
    return new Promise((resolve) => this.queued.push(resolve));
  }

  /** Hands the lane to the next reading waiting for one, else frees it. */
  private release(): void {
    const next = this.queued.shift();
    if (next) next();
    else this.running--;
  }
}

function openRollup(path: string): Promise<RollupFile> {
  return new Promise((resolve, reject) =>
    open(path, 'r', (err, fd) =>
      err ? reject(err) : resolve({ fd, buffer: Buffer.allocUnsafe(BUFFER_BYTES), asked: performance.now() }),
    ),
  );
}

/** Reads the file from its start into `buffer`: the kernel builds it anew. */
function readAt0(fd: number, buffer: Buffer): Promise<number> {
  return new Promise((resolve, reject) =>
    read(fd, buffer, 0, buffer.length, 0, (err, bytesRead) => (err ? reject(err) : resolve(bytesRead))),
  );
}

/** The process's one reader: /proc is the same for every gateway in it. */
export const processMemory = new ProcessMemory();
