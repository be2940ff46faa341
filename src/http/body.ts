import { writevSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { tgError } from '../errors.js';
import type { DType } from '../tensor/dtype.js';
import { type TensorSource, tensorSource } from '../tensor/source.js';
import { checkByteLength, makeTensor } from '../tensor/tensor.js';

/** The largest range `ChunkedBody.text` joins in the shared scratch buffer. */
const SCRATCH_BYTES = 4 * 1024 * 1024;
let scratch = Buffer.alloc(0);

/**
 * A request body as the OIP codec reads it: its JSON header as text, a BYTES input's serialised
 * items as bytes, a tensor's bytes as a source for the engine to fill from (ChunkedBody, off the
 * socket; or StagedBody, from a data-plane thread's staging file).
 */
export interface InferBody {
  readonly length: number;
  text(start: number, end: number): string;
  slice(start: number, end: number): Buffer;
  /** Bytes [start, end) as a tensor's source; throws when they are not dtype × shape's length. */
  tensor(start: number, end: number, dtype: DType, shape: number[]): TensorSource;
}

/**
 * A request body as it came off the socket: the chunks, not one buffer. Joining a large body
 * (a 600 KB image tensor arrives in about ten socket reads) into one fresh buffer costs a copy,
 * the page faults of a new allocation, and external memory that brings V8's next full collection
 * closer (docs/architecture.md, "Large bodies"). A tensor's bytes can instead go from the chunks
 * straight into the shared-memory slot the worker reads.
 */
export class ChunkedBody implements InferBody {
  /** Where each chunk starts in the body, for finding the chunk an offset falls in. */
  private readonly starts: number[];

  constructor(
    private readonly chunks: readonly Buffer[],
    readonly length: number,
  ) {
    this.starts = [];
    let start = 0;
    for (const chunk of chunks) {
      this.starts.push(start);
      start += chunk.length;
    }
  }

  /** Bytes [start, end) as one buffer: a view when they lie in one chunk, else a joined copy. */
  slice(start: number, end: number): Buffer {
    return this.view(start, end) ?? this.joined(start, end);
  }

  /** Bytes [start, end) as a view of the chunk they lie in, or undefined when they span chunks. */
  view(start: number, end: number): Buffer | undefined {
    if (start === end) return Buffer.alloc(0);
    const i = this.chunkAt(start);
    const chunk = this.chunks[i] as Buffer;
    const from = start - (this.starts[i] as number);
    return end - start <= chunk.length - from ? chunk.subarray(from, from + end - start) : undefined;
  }

  /**
   * Bytes [start, end) decoded as UTF-8. Bytes that span chunks are joined in a scratch buffer the
   * process keeps (decoding copies them anyway), not in a fresh one per request: a JSON body of a
   * few hundred KB (an image as base64) then costs no allocation and no page faults before its
   * string. Ranges over SCRATCH_BYTES are joined in a buffer of their own, so the scratch buffer
   * never holds more than that.
   */
  text(start: number, end: number): string {
    const view = this.view(start, end);
    if (view) return view.toString('utf8');
    const length = end - start;
    if (length > SCRATCH_BYTES) return this.joined(start, end).toString('utf8');
    if (scratch.length < length)
      scratch = Buffer.allocUnsafeSlow(Math.min(SCRATCH_BYTES, 2 ** Math.ceil(Math.log2(length))));
    this.copyTo(scratch, start, end);
    return scratch.toString('utf8', 0, length);
  }

  /** Copies bytes [start, end) into `target` (which holds at least end - start bytes). */
  copyTo(target: Uint8Array, start: number, end: number): void {
    if (start === end) return;
    let written = 0;
    for (let i = this.chunkAt(start); written < end - start; i++) {
      const chunk = this.chunks[i] as Buffer;
      const from = start + written - (this.starts[i] as number);
      const n = Math.min(chunk.length - from, end - start - written);
      target.set(from === 0 && n === chunk.length ? chunk : chunk.subarray(from, from + n), written);
      written += n;
    }
  }

  /**
   * Bytes [start, end) as a tensor's source: a view when one socket read holds them all, else
   * copied from the chunks by `fill`, straight into wherever the engine wants them.
   */
  tensor(start: number, end: number, dtype: DType, shape: number[]): TensorSource {
    const view = this.view(start, end);
    if (view) return tensorSource(makeTensor(dtype, shape, view));
    checkByteLength(dtype, shape, end - start);
    return { dtype, shape, byteLength: end - start, fill: (target) => this.copyTo(target, start, end) };
  }

  /** Writes bytes [start, end) to `fd` at `position`, in one writev of the chunks that hold them. */
  writeTo(fd: number, start: number, end: number, position: number): void {
    const parts: Buffer[] = [];
    for (let at = start; at < end; ) {
      const i = this.chunkAt(at);
      const chunk = this.chunks[i] as Buffer;
      const from = at - (this.starts[i] as number);
      const n = Math.min(chunk.length - from, end - at);
      parts.push(chunk.subarray(from, from + n));
      at += n;
    }
    let written = 0;
    while (written < end - start) {
      // A short write (tmpfs out of space) surfaces as an error, not as a torn tensor.
      const n = writevSync(fd, written === 0 ? parts : remainder(parts, written), position + written);
      if (n === 0) throw tgError('INTERNAL', `staging ${end - start} bytes wrote none at ${position + written}`);
      written += n;
    }
  }

  private joined(start: number, end: number): Buffer {
    const out = Buffer.allocUnsafe(end - start);
    this.copyTo(out, start, end);
    return out;
  }

  /** The index of the chunk holding byte `offset` (< length). */
  private chunkAt(offset: number): number {
    if (offset < 0 || offset >= this.length)
      throw new RangeError(`offset ${offset} outside a ${this.length}-byte body`);
    let i = this.starts.length - 1;
    while ((this.starts[i] as number) > offset) i--;
    return i;
  }
}

/** `parts` without their first `skip` bytes. */
function remainder(parts: Buffer[], skip: number): Buffer[] {
  const out: Buffer[] = [];
  for (const part of parts) {
    if (skip >= part.length) {
      skip -= part.length;
      continue;
    }
    out.push(skip > 0 ? part.subarray(skip) : part);
    skip = 0;
  }
  return out;
}

/**
 * The whole body as its chunks, up to `limit` bytes (INPUT_TOO_LARGE past it). Read with 'data'
 * and 'end' listeners rather than `for await`: the async iterator costs a promise and a microtask
 * per chunk, a visible share of a small binary request.
 */
export function readBodyChunks(req: IncomingMessage, limit: number): Promise<ChunkedBody> {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return Promise.reject(tooLarge(limit));
  return new Promise((resolveBody, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        req.resume(); // drain the rest unread, so that the refusal can still be answered
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolveBody(new ChunkedBody(chunks, size));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const onClose = () => {
      cleanup();
      reject(tgError('INVALID_REQUEST', 'the client closed the connection before the request body ended'));
    };
    const cleanup = () => {
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
    };
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  });
}

/** The whole body as one buffer, up to `limit` bytes. */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const body = await readBodyChunks(req, limit);
  return body.slice(0, body.length);
}

/** The whole body decoded as UTF-8, up to `limit` bytes: for bodies that are parsed whole (JSON). */
export async function readBodyText(req: IncomingMessage, limit: number): Promise<string> {
  const body = await readBodyChunks(req, limit);
  return body.text(0, body.length);
}

function tooLarge(limit: number) {
  return tgError(
    'INPUT_TOO_LARGE',
    `the request body is over the ${limit}-byte limit; start the server with a larger --max-body-mb`,
    { limit },
  );
}
