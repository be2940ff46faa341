import { closeSync, existsSync, ftruncateSync, openSync, readdirSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { alignUp, FirstFitAllocator } from './allocator.js';

/**
 * Shared-memory arenas as seen from the gateway. Node has no mmap in core, so the gateway moves
 * bytes with positioned read/write calls on the /dev/shm file: one memcpy each way, no
 * serialisation. The worker maps the same files and views the bytes in place (torch.frombuffer).
 */

export const SHM_DIR = '/dev/shm';
const ARENA_PREFIX = 'tensorgate-';

export function arenaPath(tag: string): string {
  return join(SHM_DIR, `${ARENA_PREFIX}${process.pid}-${tag}`);
}

/** Input arena: created, sized and allocated by the gateway; the worker only reads it. */
export class InputArena {
  private readonly fd: number;
  private closed = false;
  private readonly allocator: FirstFitAllocator;

  constructor(
    readonly path: string,
    initialBytes: number,
  ) {
    const size = alignUp(Math.max(initialBytes, 4096));
    this.fd = openSync(path, 'w+', 0o600);
    ftruncateSync(this.fd, size);
    this.allocator = new FirstFitAllocator(size);
  }

  get capacity(): number {
    return this.allocator.capacity;
  }

  /** Copies `bytes` into a fresh slot and returns its offset; grows the file when it is full. */
  write(bytes: Uint8Array): number {
    let offset = this.allocator.allocate(bytes.byteLength);
    if (offset === undefined) {
      const needed = this.allocator.capacity + alignUp(bytes.byteLength);
      const grown = Math.max(this.allocator.capacity * 2, needed);
      ftruncateSync(this.fd, grown);
      this.allocator.grow(grown);
      offset = this.allocator.allocate(bytes.byteLength) as number;
    }
    let written = 0;
    while (written < bytes.byteLength) {
      written += writeSync(this.fd, bytes, written, bytes.byteLength - written, offset + written);
    }
    return offset;
  }

  release(offset: number): void {
    this.allocator.release(offset);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
    removeFile(this.path);
  }
}

/** Output arena reader: the worker owns allocation and growth; the gateway copies slots out. */
export class OutputArenaReader {
  private fd: number | undefined;

  constructor(readonly path: string) {}

  read(offset: number, nbytes: number): Buffer {
    this.fd ??= openSync(this.path, 'r');
    const out = Buffer.allocUnsafe(nbytes);
    let done = 0;
    while (done < nbytes) {
      const n = readSync(this.fd, out, done, nbytes - done, offset + done);
      if (n === 0) throw new Error(`output arena ${this.path} ended at ${offset + done}, expected ${offset + nbytes}`);
      done += n;
    }
    return out;
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
    removeFile(this.path);
  }
}

function removeFile(path: string): void {
  try {
    if (existsSync(path)) unlinkSync(path);
  } catch {
    // Already gone (the worker or a sweep removed it): nothing to do.
  }
}

/** Removes arenas left in /dev/shm by gateways that died without cleaning up. */
export function sweepStaleArenas(dir = SHM_DIR): string[] {
  const removed: string[] = [];
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return removed;
  }
  for (const name of names) {
    const match = /^tensorgate-(\d+)-/.exec(name);
    if (!match) continue;
    const pid = Number(match[1]);
    if (pid === process.pid || isAlive(pid)) continue;
    removeFile(join(dir, name));
    removed.push(name);
  }
  return removed;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
