import { closeSync, constants, fstatSync, openSync, readSync, writeSync } from 'node:fs';
import { tgError } from '../errors.js';
import type { DType } from '../tensor/dtype.js';
import type { OutputSink, TensorSource } from '../tensor/source.js';
import { byteLength, formatType, type Tensor } from '../tensor/tensor.js';

/**
 * The system shared-memory extension: clients register POSIX shared-memory objects
 * (`/dev/shm/<key>`) as named regions, then name a region, offset and size instead of sending
 * tensor bytes. Inputs are read from the region straight into the worker's arena slot, by the
 * worker itself where it can open this process's descriptors (TensorSource.file), so that the
 * bytes never pass through the gateway's thread; outputs are written straight into the region, by
 * the worker too where it can (OutputSink), else here: one copy each way, none through an HTTP body.
 *
 * Regions are read and written with positioned reads and writes, never mapped: a client that
 * truncates its object under us gets an error for that request, where a mapping would kill the
 * server with SIGBUS. Every offset and size is checked against the region as registered and
 * against the object's current size, so nothing outside a region is ever read or written.
 * Unregistering a region that requests still use takes it off the list at once; its file is
 * closed when the last of them is done.
 */

export interface RegionStatus {
  name: string;
  key: string;
  offset: number;
  byte_size: number;
}

export class Region {
  private users = 0;
  private unregistered = false;

  constructor(
    readonly name: string,
    readonly key: string,
    private readonly fd: number,
    readonly offset: number,
    readonly byteSize: number,
  ) {}

  status(): RegionStatus {
    return { name: this.name, key: this.key, offset: this.offset, byte_size: this.byteSize };
  }

  /**
   * Held by a request from parse to response, and by a worker's use of the descriptor (which can
   * outlast a cancelled request): the file stays open until every holder is done.
   */
  acquire(): () => void {
    this.users++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.users--;
      if (this.unregistered && this.users === 0) closeSync(this.fd);
    };
  }

  unregister(): void {
    this.unregistered = true;
    if (this.users === 0) closeSync(this.fd);
  }

  /** The absolute file position of `offset..offset+size` within the region, checked. */
  private span(what: string, offset: number, size: number): number {
    if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(size) || size < 0)
      throw tgError('INVALID_REQUEST', `${what}: shared_memory_offset and _byte_size must be byte counts`);
    if (offset + size > this.byteSize)
      throw tgError(
        'SHARED_MEMORY_OUT_OF_RANGE',
        `${what}: offset ${offset} + ${size} bytes is past the end of region "${this.name}" (${this.byteSize} bytes)`,
        { region: this.name, offset, size, region_size: this.byteSize },
      );
    const fileSize = fstatSync(this.fd).size;
    if (this.offset + offset + size > fileSize)
      throw tgError(
        'SHARED_MEMORY_OUT_OF_RANGE',
        `${what}: region "${this.name}" (${this.key}) is now ${fileSize} bytes, shorter than registered`,
        { region: this.name },
      );
    return this.offset + offset;
  }

  /** An input tensor whose bytes are read from the region into their destination when filled. */
  input(name: string, dtype: DType, shape: number[], offset: number, size: number): TensorSource {
    const what = `input "${name}"`;
    const needed = byteLength(dtype, shape);
    if (size !== needed)
      throw tgError(
        'BYTE_LENGTH_MISMATCH',
        `${what}: ${formatType(dtype, shape)} needs ${needed} bytes but shared_memory_byte_size is ${size}`,
        { input: name, expected: needed, got: size },
      );
    const position = this.span(what, offset, size);
    return {
      dtype,
      shape,
      byteLength: size,
      // A worker reads the bytes itself, through this process's descriptor: the region stays
      // open until the request is answered (acquire), and the name is never looked up again.
      file: {
        path: `/proc/${process.pid}/fd/${this.fd}`,
        position,
        what: `${what}: region "${this.name}"`,
        hold: () => this.acquire(),
      },
      fill: (target) => {
        // Checked again when read: the client may have shrunk the object since the request came.
        const at = this.span(what, offset, size);
        const got = readSync(this.fd, target, 0, size, at);
        if (got !== size)
          throw tgError('SHARED_MEMORY_OUT_OF_RANGE', `${what}: region "${this.name}" ended after ${got} bytes`);
      },
    };
  }

  /**
   * The space given for an output, for a worker to write it there itself; undefined when it is not
   * a span of the region as registered (writeOutput then says why). The worker checks the object's
   * size when it writes, and leaves to writeOutput what it cannot write.
   */
  outputSink(name: string, offset: number, size: number): OutputSink | undefined {
    const valid = [offset, size].every((n) => Number.isSafeInteger(n) && n >= 0) && offset + size <= this.byteSize;
    if (!valid) return undefined;
    return {
      output: name,
      path: `/proc/${process.pid}/fd/${this.fd}`,
      position: this.offset + offset,
      capacity: size,
      hold: () => this.acquire(),
      written: false,
    };
  }

  /** Writes an output tensor into the region (after checking it fits the space given). */
  writeOutput(name: string, tensor: Tensor, offset: number, size: number): void {
    const what = `output "${name}"`;
    if (tensor.data.byteLength > size)
      throw tgError(
        'SHARED_MEMORY_OUT_OF_RANGE',
        `${what} is ${tensor.data.byteLength} bytes (${formatType(tensor.dtype, tensor.shape)}) but shared_memory_byte_size is ${size}`,
        { output: name, needed: tensor.data.byteLength, got: size },
      );
    const at = this.span(what, offset, size);
    writeSync(this.fd, tensor.data, 0, tensor.data.byteLength, at);
  }
}

/** Names of POSIX shared-memory objects: `/name`, no other slash, no `..`. */
const KEY = /^\/[A-Za-z0-9._-]{1,250}$/;
const { O_RDWR, O_NOFOLLOW, O_NONBLOCK } = constants;

export class SharedMemoryRegistry {
  private readonly regions = new Map<string, Region>();

  constructor(private readonly root = '/dev/shm') {}

  register(name: string, body: unknown): void {
    const { key, offset, byte_size } = (body ?? {}) as Record<string, unknown>;
    if (!name) throw tgError('INVALID_REQUEST', 'a region needs a name');
    if (this.regions.has(name))
      throw tgError('SHARED_MEMORY_IN_USE', `region "${name}" is already registered; unregister it first`, {
        region: name,
      });
    if (typeof key !== 'string' || !KEY.test(key) || key.includes('..'))
      throw tgError(
        'INVALID_REQUEST',
        `key ${JSON.stringify(key)} is not a POSIX shared-memory name such as "/input0" (one leading slash, letters, digits, . _ -)`,
      );
    const start = offset ?? 0;
    if (typeof start !== 'number' || !Number.isSafeInteger(start) || start < 0)
      throw tgError('INVALID_REQUEST', 'offset must be a byte count');
    if (typeof byte_size !== 'number' || !Number.isSafeInteger(byte_size) || byte_size <= 0)
      throw tgError('INVALID_REQUEST', 'byte_size must be a positive byte count');
    let fd: number;
    try {
      // As shm_open(3) opens it: a link there is not followed (ELOOP), so a client cannot have the
      // server open, and its workers read and write, a file the link leads to.
      fd = openSync(`${this.root}${key}`, O_RDWR | O_NOFOLLOW | O_NONBLOCK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      throw tgError(
        'SHARED_MEMORY_NOT_FOUND',
        code === 'ELOOP'
          ? `cannot open shared-memory object ${key}: ELOOP, it is a link; create the object itself (shm_open) and register that`
          : `cannot open shared-memory object ${key}: ${code}; create it (shm_open) before registering`,
        { key },
      );
    }
    const size = fstatSync(fd).size;
    if (!fstatSync(fd).isFile() || start + byte_size > size) {
      closeSync(fd);
      throw tgError(
        'SHARED_MEMORY_OUT_OF_RANGE',
        `shared-memory object ${key} is ${size} bytes; offset ${start} + byte_size ${byte_size} does not fit in it`,
        { key, size },
      );
    }
    this.regions.set(name, new Region(name, key, fd, start, byte_size));
  }

  unregister(name?: string): void {
    if (name === undefined) {
      for (const region of this.regions.values()) region.unregister();
      this.regions.clear();
      return;
    }
    const region = this.regions.get(name);
    if (!region) throw notRegistered(name);
    region.unregister();
    this.regions.delete(name);
  }

  status(name?: string): RegionStatus[] {
    if (name === undefined) return [...this.regions.values()].map((r) => r.status());
    const region = this.regions.get(name);
    if (!region) throw notRegistered(name);
    return [region.status()];
  }

  get(name: string): Region {
    const region = this.regions.get(name);
    if (!region) throw notRegistered(name);
    return region;
  }

  close(): void {
    this.unregister();
  }
}

function notRegistered(name: string) {
  return tgError(
    'SHARED_MEMORY_NOT_FOUND',
    `no shared-memory region "${name}" is registered; register it with POST /v2/systemsharedmemory/region/${name}/register`,
    { region: name },
  );
}
