import { closeSync, existsSync, ftruncateSync, openSync, readdirSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { alignUp, FirstFitAllocator } from './allocator.js';
import { mapFile, preallocateFile, shmMapAvailable, shmMapUnavailableReason } from './shm-map.js';

/**
 * Shared-memory arenas as seen from the gateway. Node has no mmap in core; when the optional addon
 * (shm-map.ts) is built, the gateway maps the input arena and callers fill slots in place (decode
 * base64 or read a file straight into the slot). Without it the gateway moves bytes with
 * positioned read/write calls on the /dev/shm file: one memcpy each way, no serialisation. The
 * worker maps the same files and views the bytes in place (torch.frombuffer).
 */

export const SHM_DIR = '/dev/shm';
const ARENA_PREFIX = 'tensorgate-';

export function arenaPath(tag: string): string {
  return join(SHM_DIR, `${ARENA_PREFIX}${process.pid}-${tag}`);
}

/**
 * A slot reserved in the input arena, to be filled in place. Fill `view` (exactly the requested
 * number of bytes), then call `commit()` once, before telling the worker about `offset`. When the
 * arena is mapped, `view` is the arena memory itself and commit() does nothing; otherwise `view`
 * is a scratch Buffer and commit() writes it into the file. Do not touch `view` after
 * `release(offset)`: the slot may then hold another request's bytes.
 */
export interface ArenaSlot {
  readonly offset: number;
  readonly view: Buffer;
  commit(): void;
}

export interface InputArenaOptions {
  /** Map the file (true) or use positioned fs writes (false). Default: shmMapAvailable(). */
  mmap?: boolean;
}

const NO_COMMIT = (): void => {};

/** Input arena: created, sized and allocated by the gateway; the worker only reads it. */
export class InputArena {
  private readonly fd: number;
  private closed = false;
  private readonly allocator: FirstFitAllocator;
  /** The whole file, mapped; undefined on the fs path. Replaced on growth: old views keep theirs. */
  private map: Buffer | undefined;
  /** Whether slots are views of the mapped file (see InputArenaOptions.mmap). */
  readonly mapped: boolean;

  constructor(
    readonly path: string,
    initialBytes: number,
    options: InputArenaOptions = {},
  ) {
    const size = alignUp(Math.max(initialBytes, 4096));
    this.mapped = options.mmap ?? shmMapAvailable();
    this.fd = openSync(path, 'w+', 0o600);
    try {
      ftruncateSync(this.fd, size);
      if (this.mapped) this.map = this.mapWhole(size);
    } catch (err) {
      closeSync(this.fd);
      removeFile(path);
      throw err;
    }
    this.allocator = new FirstFitAllocator(size);
  }

  get capacity(): number {
    return this.allocator.capacity;
  }

  /**
   * Allocates a slot of `nbytes` (growing the file when it is full) and returns it to be filled in
   * place; see ArenaSlot.
   */
  reserve(nbytes: number): ArenaSlot {
    const offset = this.allocate(nbytes);
    if (this.map) return { offset, view: this.map.subarray(offset, offset + nbytes), commit: NO_COMMIT };
    const view = Buffer.allocUnsafe(nbytes);
    return { offset, view, commit: () => this.writeAt(view, offset) };
  }

  /** Copies `bytes` into a fresh slot and returns its offset; grows the file when it is full. */
  write(bytes: Uint8Array): number {
    const offset = this.allocate(bytes.byteLength);
    if (this.map) this.map.set(bytes, offset);
    else this.writeAt(bytes, offset); // straight from `bytes`: no scratch copy on the fs path
    return offset;
  }

  release(offset: number): void {
    this.allocator.release(offset);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    // Views handed out stay valid (the mapping outlives the fd and the name) until the GC
    // collects them; dropping ours lets it.
    this.map = undefined;
    closeSync(this.fd);
    removeFile(this.path);
  }

  private allocate(nbytes: number): number {
    if (this.closed) throw new Error(`input arena ${this.path} is closed`);
    let offset = this.allocator.allocate(nbytes);
    if (offset === undefined) {
      const needed = this.allocator.capacity + alignUp(nbytes);
      const grown = Math.max(this.allocator.capacity * 2, needed);
      ftruncateSync(this.fd, grown);
      // Buffers over the old mapping stay valid: it lives until the GC collects its last view,
      // and it maps the same pages, so what is written through it still reaches the file.
      if (this.mapped) this.map = this.mapWhole(grown);
      this.allocator.grow(grown);
      offset = this.allocator.allocate(nbytes) as number;
    }
    return offset;
  }

  private mapWhole(size: number): Buffer {
    // Backing every page first turns a full /dev/shm into ENOSPC here instead of SIGBUS on a write.
    const map = preallocateFile(this.fd, size) ? mapFile(this.fd, size) : undefined;
    if (!map) throw new Error(`cannot map input arena ${this.path}: ${shmMapUnavailableReason() ?? 'unavailable'}`);
    return map;
  }

  private writeAt(bytes: Uint8Array, offset: number): void {
    let written = 0;
    while (written < bytes.byteLength) {
      written += writeSync(this.fd, bytes, written, bytes.byteLength - written, offset + written);
    }
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

/** Whether a process of that pid exists (one of another user's counts). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
