import { tgError } from '../errors.js';
import type { AllowedFile } from '../security/confined-files.js';
import { type TensorSource, tensorSource } from './source.js';
import { makeTensor } from './tensor.js';
import { fileSpanSource } from './tensor-file.js';

/**
 * BYTES tensors, OIP v2's variable-length elements (encoded images, strings): shape [items], each
 * item a 4-byte little-endian length followed by that many bytes. That is the binary tensor
 * extension's serialisation, and also how processed inputs travel to the torch worker, which
 * splits them again (python/tensorgate/_processing.py) without copying.
 */

/**
 * An item that is a whole file (an image or recording given by path), left where it is until its
 * destination is known: then read straight into it, by the engine's worker itself where it can.
 */
export interface FileItem {
  /** The file, under the allowed roots, as it was checked. */
  readonly file: AllowedFile;
  /** The item as an error names it: `input "image": /photos/cat.png`. */
  readonly what: string;
}

export type BytesItem = Uint8Array | FileItem;

const itemBytes = (item: BytesItem) => (item instanceof Uint8Array ? item.byteLength : item.file.size);

/**
 * A BYTES tensor source over items in memory or in files; each is copied once, into the arena slot.
 * With files among them, the source is made of parts (each item's length, then its bytes or its
 * file), so that an engine whose worker reads files itself leaves those bytes to it.
 */
export function bytesSource(items: readonly BytesItem[]): TensorSource {
  const byteLength = items.reduce((sum, item) => sum + 4 + itemBytes(item), 0);
  const head = { dtype: 'uint8' as const, shape: [items.length], byteLength, bytes: true as const };
  if (items.every((item) => item instanceof Uint8Array)) {
    return {
      ...head,
      fill(target) {
        const view = new DataView(target.buffer, target.byteOffset, target.byteLength);
        let at = 0;
        for (const item of items) {
          view.setUint32(at, item.byteLength, true);
          target.set(item, at + 4);
          at += 4 + item.byteLength;
        }
      },
    };
  }
  const parts = items.flatMap((item): TensorSource[] => {
    const length = Buffer.alloc(4);
    length.writeUInt32LE(itemBytes(item));
    const bytes =
      item instanceof Uint8Array
        ? tensorSource(makeTensor('uint8', [item.byteLength], item))
        : fileSpanSource(item.file, 0, item.file.size, item.what, { dtype: 'uint8', shape: [item.file.size] });
    return [tensorSource(makeTensor('uint8', [4], length)), bytes];
  });
  return {
    ...head,
    parts,
    fill(target) {
      let at = 0;
      for (const part of parts) {
        part.fill(target.subarray(at, at + part.byteLength));
        at += part.byteLength;
      }
    },
  };
}

/**
 * A BYTES tensor source over data already serialised (an OIP v2 binary body's slice, gRPC's raw
 * contents), checked to hold exactly `count` items; it is copied into the arena as it is. The
 * error names the input.
 */
export function serialisedBytesSource(input: string, data: Uint8Array, count: number): TensorSource {
  try {
    splitBytes(data, count);
  } catch (err) {
    throw tgError('BAD_TENSOR', `input "${input}": ${(err as Error).message}`, { input });
  }
  return { dtype: 'uint8', shape: [count], byteLength: data.byteLength, bytes: true, data, fill: (t) => t.set(data) };
}

/** The items of serialised BYTES data; `count` when the shape says how many there must be. */
export function splitBytes(data: Uint8Array, count?: number): Uint8Array[] {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const items: Uint8Array[] = [];
  let at = 0;
  while (at < data.byteLength && (count === undefined || items.length < count)) {
    if (at + 4 > data.byteLength)
      throw tgError('BAD_TENSOR', `BYTES item ${items.length}: the data ends inside its 4-byte length`, {
        item: items.length,
      });
    const length = view.getUint32(at, true);
    if (at + 4 + length > data.byteLength)
      throw tgError(
        'BAD_TENSOR',
        `BYTES item ${items.length}: its length prefix says ${length} bytes but ${data.byteLength - at - 4} are left`,
        { item: items.length, length },
      );
    items.push(data.subarray(at + 4, at + 4 + length));
    at += 4 + length;
  }
  if (count !== undefined && items.length !== count)
    throw tgError('BAD_TENSOR', `BYTES data holds ${items.length} items where the shape says ${count}`, {
      items: items.length,
      expected: count,
    });
  if (at !== data.byteLength)
    throw tgError('BAD_TENSOR', `BYTES data has ${data.byteLength - at} bytes after its last item`, {
      trailing: data.byteLength - at,
    });
  return items;
}
