import { readSync } from 'node:fs';
import { tgError } from '../../errors.js';
import type { InferBody } from '../../http/body.js';
import type { DType } from '../../tensor/dtype.js';
import { type TensorSource, tensorSource } from '../../tensor/source.js';
import { checkByteLength, makeTensor } from '../../tensor/tensor.js';

/**
 * A request body that a data-plane thread read: its JSON header in memory, and its binary tensor
 * data in the thread's staging file, from `position` on. A tensor in the staged part is a file
 * span that the worker reads itself (`/proc/<pid>/fd/<fd>`, as for a system shared-memory region),
 * so its bytes never pass through the main thread. The space is given back (`onFree`) once the
 * request is answered and no worker may still read it (a cancelled request's pass can run on).
 */
export class StagedBody implements InferBody {
  private holds = 0;
  private answered = false;
  private freed = false;
  private readonly path: string;

  constructor(
    private readonly header: Buffer,
    readonly length: number,
    private readonly fd: number,
    private readonly position: number,
    private readonly onFree: () => void,
  ) {
    this.path = `/proc/${process.pid}/fd/${fd}`;
  }

  text(start: number, end: number): string {
    return end <= this.header.length
      ? this.header.toString('utf8', start, end)
      : this.slice(start, end).toString('utf8');
  }

  slice(start: number, end: number): Buffer {
    if (end <= this.header.length) return this.header.subarray(start, end);
    const out = Buffer.allocUnsafe(end - start);
    const inHeader = Math.max(0, this.header.length - start);
    if (inHeader > 0) this.header.copy(out, 0, start);
    this.read(out.subarray(inHeader), start + inHeader);
    return out;
  }

  tensor(start: number, end: number, dtype: DType, shape: number[]): TensorSource {
    if (start < this.header.length) return tensorSource(makeTensor(dtype, shape, this.slice(start, end)));
    checkByteLength(dtype, shape, end - start);
    const at = this.position + start - this.header.length;
    return {
      dtype,
      shape,
      byteLength: end - start,
      file: { path: this.path, position: at, what: 'the request body, as staged', hold: () => this.hold() },
      fill: (target) => this.read(target.subarray(0, end - start), start),
    };
  }

  /** The request is answered: the space is freed now, or when the last worker read is done. */
  done(): void {
    this.answered = true;
    this.maybeFree();
  }

  /** Body bytes from `start` (at or past the header) into `target`, whole. */
  private read(target: Uint8Array, start: number): void {
    const at = this.position + start - this.header.length;
    let got = 0;
    while (got < target.byteLength) {
      const n = readSync(this.fd, target, got, target.byteLength - got, at + got);
      if (n === 0) throw tgError('INTERNAL', `the staged request body ended ${target.byteLength - got} bytes early`);
      got += n;
    }
  }

  private hold(): () => void {
    this.holds++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.holds--;
      this.maybeFree();
    };
  }

  private maybeFree(): void {
    if (this.freed || !this.answered || this.holds > 0) return;
    this.freed = true;
    this.onFree();
  }
}
