import { closeSync, readSync } from 'node:fs';
import { tgError } from '../errors.js';
import { type AllowedFile, reopenAllowedFile } from '../security/confined-files.js';
import { parseNpyLayout, type TensorLayout } from './npy.js';
import { decodeSafetensors, parseSafetensorsLayouts, safetensorsHeaderBytes } from './safetensors.js';
import { type TensorSource, tensorSource } from './source.js';
import { makeTensor, type Tensor } from './tensor.js';

/**
 * Arrays in files, read without loading the file whole. A `.npy` file as a tensor source: the
 * header is read and checked now (dtype, shape, exact file size), the data is read later, straight
 * into its destination with one read(2). Nothing is allocated for the data on the gateway side,
 * except for a file of at most 4 KiB, which the header's read brings in whole.
 *
 * The files are under the allowed roots (security/confined-files.ts): the header is read from the
 * descriptor that was checked, and a later read opens the file again only if it is still the same.
 */

const FIRST_READ = 4096;

/** `fd`: `file` opened for reading (openAllowedFile); the caller closes it. */
export function npyFileSource(file: AllowedFile, fd: number): TensorSource {
  const { layout, head } = readHead(fd, file.size);
  const { dtype, shape, dataStart, dataBytes } = layout;
  // A small file came in whole with the header: keep its data rather than open it a second time.
  if (head.byteLength === file.size) return tensorSource(makeTensor(dtype, shape, head.subarray(dataStart)));
  return fileSpanSource(file, dataStart, dataBytes, file.path, { dtype, shape });
}

/**
 * One tensor of a `.safetensors` file as a source, as `npyFileSource` makes one of a `.npy` file:
 * the header is read and checked now (every tensor, against the file's size), the chosen tensor's
 * bytes later, straight into their destination; a file of at most 4 KiB is read whole now.
 * `choose` names the tensor from the file's (or throws). `fd`: `file` opened for reading; the
 * caller closes it.
 */
export function safetensorsFileSource(
  file: AllowedFile,
  fd: number,
  choose: (names: string[]) => string,
): TensorSource {
  if (file.size <= FIRST_READ) {
    const tensors = decodeSafetensors(readAt(fd, Buffer.allocUnsafe(file.size), 0));
    return tensorSource(tensors.get(choose([...tensors.keys()])) as Tensor);
  }
  const layouts = readSafetensorsLayouts(fd, file.size);
  const name = choose([...layouts.keys()]);
  const { dtype, shape, dataStart, dataBytes } = layouts.get(name) as TensorLayout;
  return fileSpanSource(file, dataStart, dataBytes, `${file.path} tensor "${name}"`, { dtype, shape });
}

/**
 * `byteLength` bytes at `position` of `file` as a source: read straight into their destination
 * with one read(2) when filled, or by the engine's worker itself (a FileSpan the engine opens for
 * the request). Either way the file is opened again only if it is still the one checked. A file
 * shorter by then is BAD_TENSOR naming the bytes by `what`.
 */
export function fileSpanSource(
  file: AllowedFile,
  position: number,
  byteLength: number,
  what: string,
  tensor: Pick<TensorSource, 'dtype' | 'shape' | 'bytes'>,
): TensorSource {
  const { path } = file;
  const open = () => reopenAllowedFile(file, what);
  return {
    ...tensor,
    byteLength,
    file: { path, open, position, what, truncated: 'BAD_TENSOR' },
    fill(target) {
      const fd = open();
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

/** Each tensor's layout in a `.safetensors` file open at `fd`, its header read and checked against the file's size. */
export function readSafetensorsLayouts(fd: number, fileBytes: number): Map<string, TensorLayout> {
  const first8 = readAt(fd, Buffer.alloc(Math.min(8, fileBytes)), 0);
  const headerBytes = safetensorsHeaderBytes(first8, fileBytes);
  return parseSafetensorsLayouts(readAt(fd, Buffer.allocUnsafe(8 + headerBytes), 0), fileBytes);
}

/** The layout of a `.npy` file open at `fd`, its header read and checked against the file's size. */
export function readNpyLayout(fd: number, fileBytes: number): TensorLayout {
  return readHead(fd, fileBytes).layout;
}

function readHead(fd: number, fileBytes: number): { layout: TensorLayout; head: Buffer } {
  let head = readAt(fd, Buffer.allocUnsafe(Math.min(fileBytes, FIRST_READ)), 0);
  // A header longer than the first read (rare: version 2/3, huge shapes): read up to its end.
  if (head.byteLength >= 12) {
    const headerEnd = head[6] === 1 ? 10 + head.readUInt16LE(8) : 12 + head.readUInt32LE(8);
    if (headerEnd > head.byteLength && headerEnd <= fileBytes) head = readAt(fd, Buffer.allocUnsafe(headerEnd), 0);
  }
  return { layout: parseNpyLayout(head, fileBytes), head };
}

/**
 * Rows `start` to `start + count` of an array's first dimension in a file (a `.npy` file, or one
 * tensor of a `.safetensors` file) as a tensor source: read
 * straight into their destination with one read(2) when filled (a batch job's request).
 */
export function fileRowsSource(file: AllowedFile, layout: TensorLayout, start: number, count: number): TensorSource {
  const rowBytes = layout.shape[0] ? layout.dataBytes / layout.shape[0] : 0;
  return fileSpanSource(
    file,
    layout.dataStart + start * rowBytes,
    rowBytes * count,
    `${file.path} rows ${start}-${start + count - 1}`,
    { dtype: layout.dtype, shape: [count, ...layout.shape.slice(1)] },
  );
}

/** Up to `bytes` bytes from the start of the file open at `fd` (what one read brings). */
export function readFileHead(fd: number, bytes: number): Buffer {
  return readAt(fd, Buffer.allocUnsafe(bytes), 0);
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
