import { closeSync, fsyncSync, ftruncateSync, writeSync } from 'node:fs';
import type { NamedTensor } from '../engines/engine.js';
import { tgError } from '../errors.js';
import type { TensorSpec } from '../registry/model-config.js';
import { type DType, dtypeSize, npyDescr } from '../tensor/dtype.js';
import { encodeNpyHeader } from '../tensor/npy.js';

/**
 * A job's output tensors as `.npy` files (`"tensors": "npy"`): one file per output of the model,
 * `<results without extension>.<output>.npy` beside the results file, row i holding item i's row.
 * The rows of each commit are appended and the header's row count rewritten in place (the header
 * is sized for the job's item count), then fsynced, before the job's progress is recorded. The
 * file is therefore a valid array of the committed items at every moment, `numpy.load(path,
 * mmap_mode="r")` reads it while the job runs, and a resume cuts it back to the recorded count as
 * it does the results file. A failed item's row is NaN (integers: 0); the results file says why.
 */

/** An output written to a .npy file: its dtype and the shape of one item's row. */
export interface OutputRows {
  name: string;
  dtype: DType;
  rowShape: number[];
}

/** Each item's rows by output; undefined for an item that failed. */
export type ItemRows = Map<string, Uint8Array> | undefined;

/** The outputs a job writes as .npy files, checked at the start: fixed row shapes, numpy dtypes. */
export function outputRowsOf(what: string, outputs: TensorSpec[]): OutputRows[] {
  return outputs.map(({ name, dtype, shape }) => {
    const rowShape = shape.slice(1);
    if (shape.length === 0 || rowShape.some((d) => d < 0))
      throw tgError(
        'BAD_PARAMETER',
        `tensors: ${what}'s output "${name}" has shape [${shape.join(', ')}]: its rows vary in shape, so they cannot be stacked in one .npy file; leave "tensors" out (the results lines hold each row, up to 4096 values)`,
        { parameter: 'tensors', output: name },
      );
    if (npyDescr(dtype) === undefined)
      throw tgError(
        'BAD_PARAMETER',
        `tensors: ${what}'s output "${name}" is ${dtype}, which numpy has no dtype for; leave "tensors" out or have the model return float32`,
        { parameter: 'tensors', output: name },
      );
    return { name, dtype, rowShape };
  });
}

/** Where an output's rows go: `/data/emb.jsonl` and output `embedding` give `/data/emb.embedding.npy`. */
export function tensorPath(results: string, output: string): string {
  return `${results.replace(/\.[^./]+$/, '')}.${output}.npy`;
}

function rowBytes(output: OutputRows): number {
  return output.rowShape.reduce((a, b) => a * b, 1) * dtypeSize(output.dtype);
}

/** Item k's rows of each output, copied out of a request's output tensors (which are reused). */
export function rowsOfItems(outputs: OutputRows[], tensors: NamedTensor[], count: number): ItemRows[] {
  const found = outputs.map((output) => {
    const named = tensors.find((t) => t.name === output.name);
    if (!named) return undefined;
    const { dtype, shape, data } = named.tensor;
    const fits =
      shape[0] === count &&
      shape.length === output.rowShape.length + 1 &&
      output.rowShape.every((d, i) => shape[i + 1] === d);
    if (dtype !== output.dtype || !fits)
      throw tgError(
        dtype !== output.dtype ? 'DTYPE_MISMATCH' : 'SHAPE_MISMATCH',
        `tensors: output "${output.name}" came back ${dtype}[${shape.join(', ')}] for ${count} items, where its spec says ${output.dtype} rows of [${output.rowShape.join(', ')}]; the .npy file cannot take it`,
        { output: output.name },
      );
    return data;
  });
  return Array.from({ length: count }, (_, k) => {
    const rows = new Map<string, Uint8Array>();
    outputs.forEach((output, i) => {
      const data = found[i];
      const size = rowBytes(output);
      if (data) rows.set(output.name, data.slice(k * size, (k + 1) * size));
    });
    return rows;
  });
}

/** A row of NaN for floats, zeros for the rest: what a failed item (or a missing output) gets. */
function blankRow(output: OutputRows): Uint8Array {
  const row = new Uint8Array(rowBytes(output));
  const nan: Record<string, () => void> = {
    float32: () => new Float32Array(row.buffer).fill(Number.NaN),
    float64: () => new Float64Array(row.buffer).fill(Number.NaN),
    float16: () => new Uint16Array(row.buffer).fill(0x7e00),
  };
  nan[output.dtype]?.();
  return row;
}

/** A job's open .npy files while it runs in this process. */
export class TensorFiles {
  private readonly files: { output: OutputRows; path: string; fd: number; headerBytes: number; rowBytes: number }[] =
    [];

  /**
   * Opens each output's file and cuts it back to `done` rows (a run that did not get to record a
   * commit may have written past it). `total` sizes the header; `create` makes the files (a new job).
   * `open` opens a file under the allowed roots (openResultsFile).
   */
  constructor(
    outputs: OutputRows[],
    results: string,
    total: number,
    done: number,
    create: boolean,
    open: (path: string, how: 'create' | 'update') => number,
  ) {
    try {
      for (const output of outputs) {
        const path = tensorPath(results, output.name);
        const headerBytes = encodeNpyHeader(output.dtype, [total, ...output.rowShape]).byteLength;
        const fd = open(path, create ? 'create' : 'update');
        this.files.push({ output, path, fd, headerBytes, rowBytes: rowBytes(output) });
      }
      for (const file of this.files) ftruncateSync(file.fd, file.headerBytes + done * file.rowBytes);
      this.writeHeaders(done);
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /** Appends the rows of items `done` to `done + rows.length - 1`, then the header that counts them. */
  append(done: number, rows: ItemRows[]): void {
    for (const file of this.files) {
      const blank = blankRow(file.output);
      const bytes = Buffer.concat(rows.map((item) => item?.get(file.output.name) ?? blank));
      writeAll(file.fd, bytes, file.headerBytes + done * file.rowBytes);
    }
    this.writeHeaders(done + rows.length);
  }

  private writeHeaders(rows: number): void {
    for (const file of this.files) {
      const header = encodeNpyHeader(file.output.dtype, [rows, ...file.output.rowShape], file.headerBytes);
      writeAll(file.fd, header, 0);
      fsyncSync(file.fd);
    }
  }

  close(): void {
    for (const file of this.files.splice(0)) closeSync(file.fd);
  }
}

/** Writes all of `bytes` at `position` (a write may take fewer): the results file's commits use it too. */
export function writeAll(fd: number, bytes: Uint8Array, position: number): void {
  let done = 0;
  while (done < bytes.byteLength) done += writeSync(fd, bytes, done, bytes.byteLength - done, position + done);
}
