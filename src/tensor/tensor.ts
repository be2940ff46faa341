/**
 * A tensor is a dtype, a shape and its raw little-endian row-major bytes. `data` is a view: it may
 * be a slice of a request body, a file or a shared-memory arena, at any byte offset, so typed
 * arrays over it are made only through `typedView`, which copies when the offset is unaligned.
 */
import { endianness } from 'node:os';
import { tgError } from '../errors.js';
import { DTYPES, type DType, dtypeSize, isDType } from './dtype.js';
import { bfloat16Values, float16Values } from './half.js';

if (endianness() !== 'LE') throw new Error('tensorgate needs a little-endian host: tensors are little-endian bytes');

export interface Tensor {
  dtype: DType;
  shape: number[];
  data: Uint8Array;
}

export type TypedView =
  | Float32Array
  | Float64Array
  | Uint16Array
  | Int8Array
  | Uint8Array
  | Int16Array
  | Int32Array
  | BigInt64Array;

const VIEWS = {
  float32: Float32Array,
  float64: Float64Array,
  float16: Uint16Array,
  bfloat16: Uint16Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  int32: Int32Array,
  int64: BigInt64Array,
  bool: Uint8Array,
} as const satisfies Record<DType, unknown>;

/** Number of elements; 1 for a rank-0 shape. */
export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Throws BAD_TENSOR unless `shape` is an array of non-negative integers with a safe element count. */
/**
 * The most dimensions a tensor may have, in a declared shape or a nested array. PyTorch allows 64;
 * no model takes more than a handful, and a bound keeps every walk over a shape or an array short.
 */
export const MAX_RANK = 32;

export function checkShape(shape: unknown): asserts shape is number[] {
  if (!Array.isArray(shape)) {
    throw tgError('BAD_TENSOR', `shape must be an array of non-negative integers, e.g. [1, 3, 224, 224]`, { shape });
  }
  if (shape.length > MAX_RANK) {
    throw tgError('BAD_TENSOR', `shape has ${shape.length} dimensions; at most ${MAX_RANK} are accepted`, {
      rank: shape.length,
    });
  }
  for (let i = 0; i < shape.length; i++) {
    const d: unknown = shape[i];
    if (typeof d !== 'number' || !Number.isSafeInteger(d) || d < 0) {
      throw tgError('BAD_TENSOR', `shape[${i}] is ${JSON.stringify(d)}; every dimension must be an integer >= 0`, {
        shape,
      });
    }
  }
  if (!Number.isSafeInteger(numel(shape))) {
    throw tgError('BAD_TENSOR', `shape [${shape.join(',')}] has too many elements to address`, { shape });
  }
}

/** Bytes a dense tensor of this dtype and shape occupies. */
export function byteLength(dtype: DType, shape: readonly number[]): number {
  return numel(shape) * dtypeSize(dtype);
}

/** `float32[1,3,224,224]`, the way messages and summaries name a tensor type. */
export function formatType(dtype: DType, shape: readonly number[]): string {
  return `${dtype}[${shape.join(',')}]`;
}

/** Checks dtype, shape and byte length, and wraps `data` without copying it. */
export function makeTensor(dtype: DType, shape: number[], data: Uint8Array): Tensor {
  if (!isDType(dtype)) {
    throw tgError('BAD_TENSOR', `unknown dtype ${JSON.stringify(dtype)}; use one of ${DTYPES.join(', ')}`, { dtype });
  }
  checkShape(shape);
  checkByteLength(dtype, shape, data.byteLength);
  return { dtype, shape, data };
}

/** BYTE_LENGTH_MISMATCH unless `got` bytes are exactly a `dtype` tensor of `shape`. */
export function checkByteLength(dtype: DType, shape: readonly number[], got: number): void {
  const expected = byteLength(dtype, shape);
  if (got !== expected) {
    throw tgError(
      'BYTE_LENGTH_MISMATCH',
      `${formatType(dtype, shape)} needs ${expected} bytes (${numel(shape)} elements x ${dtypeSize(dtype)} bytes) ` +
        `but got ${got}; send exactly numel x itemsize raw little-endian row-major bytes, ` +
        'or fix the dtype or shape',
      { dtype, shape, expected, got },
    );
  }
}

/**
 * A typed array over the tensor's elements (float16 and bfloat16 as their Uint16 bits, bool as
 * Uint8). Zero-copy when the data is aligned for the element size; a copy otherwise.
 */
export function typedView(t: Tensor): TypedView {
  const size = dtypeSize(t.dtype);
  const bytes = t.data.byteOffset % size === 0 ? t.data : new Uint8Array(t.data);
  return new VIEWS[t.dtype](bytes.buffer as ArrayBuffer, bytes.byteOffset, bytes.byteLength / size);
}

/** A function reading element `i` (flat, row-major) as a number; int64 beyond 2^53 loses precision. */
export function numberReader(t: Tensor): (i: number) => number {
  const view = typedView(t);
  switch (t.dtype) {
    case 'float16': {
      const table = float16Values();
      return (i) => table[view[i] as number] as number;
    }
    case 'bfloat16': {
      const table = bfloat16Values();
      return (i) => table[view[i] as number] as number;
    }
    case 'int64':
      return (i) => Number(view[i] as bigint);
    case 'bool':
      return (i) => (view[i] ? 1 : 0);
    default:
      return (i) => view[i] as number;
  }
}

/** Every element as a double (bool as 0/1, int64 rounded to the nearest double). */
export function toNumbers(t: Tensor): Float64Array {
  if (t.dtype === 'float16' || t.dtype === 'bfloat16' || t.dtype === 'bool') {
    const read = numberReader(t);
    const out = new Float64Array(numel(t.shape));
    for (let i = 0; i < out.length; i++) out[i] = read(i);
    return out;
  }
  const view = typedView(t);
  if (view instanceof BigInt64Array) return Float64Array.from(view, Number);
  return Float64Array.from(view as Exclude<TypedView, BigInt64Array>);
}
