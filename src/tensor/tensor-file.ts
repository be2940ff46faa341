import { closeSync, openSync, readSync } from 'node:fs';
import { tgError } from '../errors.js';
import { parseNpyLayout, type TensorLayout } from './npy.js';
import { parseSafetensorsLayouts, safetensorsHeaderBytes } from './safetensors.js';
import { type TensorSource, tensorSource } from './source.js';
import { makeTensor } from './tensor.js';

/**
 * Arrays in files, read without loading the file whole. A `.npy` file as a tensor source: the
 * header is read and checked now (dtype, shape, exact file size), the data is read later, straight
 * into its destination with one read(2). Nothing is allocated for the data on the gateway side,
 * except for a file of at most 4 KiB, which the header's read brings in whole.
 */

const FIRST_READ = 4096;

export function npyFileSource(path: string, fileBytes: number): TensorSource {
  const { layout, head } = readHead(path, fileBytes);
  const { dtype, shape, dataStart, dataBytes } = layout;
  // A small file came in whole with the header: keep its data rather than open it a second time.
  if (head.byteLength === fileBytes) return tensorSource(makeTensor(dtype, shape, head.subarray(dataStart)));
  return fileSpanSource(path, dataStart, dataBytes, path, { dtype, shape });
}

/**
 * `byteLength` bytes at `position` of the file at `path` as a source: read straight into their
 * destination with one read(2) when filled, or by the engine's worker itself (a FileSpan the
 * engine opens for the request). A file shorter by then is BAD_TENSOR naming the bytes by `what`.
 */
export function fileSpanSource(
  path: string,
  position: number,
  byteLength: number,
  what: string,
  tensor: Pick<TensorSource, 'dtype' | 'shape' | 'bytes'>,
): TensorSource {
  return {
    ...tensor,
    byteLength,
    file: { path, open: true, position, what, truncated: 'BAD_TENSOR' },
    fill(target) {
      let fd: number;
      try {
        fd = openSync(path, 'r');
      } catch {
        throw tgError('FILE_NOT_FOUND', `${what} was removed before it could be read`, { path });
      }
      try {
        const got = readInto(fd, target.subarray(0, byteLength), position);
        if (got !== byteLength)
          throw tgError('BAD_TENSOR', `${what} changed while it was read: ${got} of ${byteLength} bytes`, { path });
      } finally {
        closeSync(fd);
      }
    },
  };
}

/** Each tensor's layout in a `.safetensors` file, its header read and checked against the file's size. */
export function readSafetensorsLayouts(path: string, fileBytes: number): Map<string, TensorLayout> {
  const fd = openSync(path, 'r');
  try {
    const first8 = readAt(fd, Buffer.alloc(Math.min(8, fileBytes)), 0);
    const headerBytes = safetensorsHeaderBytes(first8, fileBytes);
    return parseSafetensorsLayouts(readAt(fd, Buffer.allocUnsafe(8 + headerBytes), 0), fileBytes);
  } finally {
    closeSync(fd);
  }
}

/** A `.npy` file's layout, its header read and checked against the file's size. */
export function readNpyLayout(path: string, fileBytes: number): TensorLayout {
  return readHead(path, fileBytes).layout;
}

function readHead(path: string, fileBytes: number): { layout: TensorLayout; head: Buffer } {
  const fd = openSync(path, 'r');
  try {
    let head = readAt(fd, Buffer.allocUnsafe(Math.min(fileBytes, FIRST_READ)), 0);
    // A header longer than the first read (rare: version 2/3, huge shapes): read up to its end.
    if (head.byteLength >= 12) {
      const headerEnd = head[6] === 1 ? 10 + head.readUInt16LE(8) : 12 + head.readUInt32LE(8);
      if (headerEnd > head.byteLength && headerEnd <= fileBytes) head = readAt(fd, Buffer.allocUnsafe(headerEnd), 0);
    }
    return { layout: parseNpyLayout(head, fileBytes), head };
  } finally {
    closeSync(fd);
  }
}

/**
 * Rows `start` to `start + count` of an array's first dimension in a file (a `.npy` file, or one
 * tensor of a `.safetensors` file) as a tensor source: read
 * straight into their destination with one read(2) when filled (a batch job's request).
 */
export function fileRowsSource(path: string, layout: TensorLayout, start: number, count: number): TensorSource {
  const rowBytes = layout.shape[0] ? layout.dataBytes / layout.shape[0] : 0;
  return fileSpanSource(
    path,
    layout.dataStart + start * rowBytes,
    rowBytes * count,
    `${path} rows ${start}-${start + count - 1}`,
    { dtype: layout.dtype, shape: [count, ...layout.shape.slice(1)] },
  );
}

/** Up to `bytes` bytes from the start of the file at `path` (what one read brings). */
export function readFileHead(path: string, bytes: number): Buffer {
  const fd = openSync(path, 'r');
  try {
    return readAt(fd, Buffer.allocUnsafe(bytes), 0);
  } finally {
    closeSync(fd);
  }
}

function readAt(fd: number, buf: Buffer, position: number): Buffer {
  return buf.subarray(0, readInto(fd, buf, position));
}

function readInto(fd: number, target: Uint8Array, position: number): number {
  let done = 0;
  while (done < target.byteLength) {
    const n = readSync(fd, target, done, target.byteLength - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}
