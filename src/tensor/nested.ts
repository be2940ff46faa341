/**
 * Nested JSON arrays <-> tensors, for small hand-written inputs and small outputs. Inputs are
 * checked to be rectangular, numeric and representable in the dtype; errors name the path of the
 * offending element (e.g. `[0][3]`) so an agent can fix its call.
 */
import { tgError } from '../errors.js';
import { DTYPES, type DType, dtypeSize, isDType } from './dtype.js';
import { floatToBfloat16Bits, floatToHalfBits } from './half.js';
import { MAX_RANK, numberReader, numel, type Tensor } from './tensor.js';

export type NestedArray = number | boolean | NestedArray[];
/** A nested array whose leaves are `T`. */
export type Nested<T> = T | Nested<T>[];

export interface FromNestedArrayOptions {
  /** Refuse (INPUT_TOO_LARGE) arrays with more elements than this; checked before allocating. */
  maxElements?: number;
}

type Writer = (i: number, x: unknown, path: number[]) => void;

const INT_RANGES: Partial<Record<DType, [number, number]>> = {
  int8: [-128, 127],
  uint8: [0, 255],
  int16: [-32768, 32767],
  int32: [-2147483648, 2147483647],
  int64: [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
};
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const FLOAT_MAX: Partial<Record<DType, string>> = {
  float32: '3.4028235e38',
  float16: '65504',
  bfloat16: '3.3895314e38',
};

export function formatPath(path: readonly number[]): string {
  return path.length === 0 ? 'the value' : path.map((i) => `[${i}]`).join('');
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (Array.isArray(x)) return 'an array';
  if (typeof x === 'string') return `a string (${JSON.stringify(x.length > 20 ? `${x.slice(0, 20)}...` : x)})`;
  if (typeof x === 'number') return String(x);
  if (typeof x === 'boolean') return `a boolean (${x})`;
  return typeof x === 'object' ? 'an object' : String(x);
}

function badElement(path: number[], x: unknown, dtype: DType, need: string): Error {
  return tgError('BAD_TENSOR', `element ${formatPath(path)} is ${describe(x)}; dtype ${dtype} needs ${need}`, {
    path: formatPath(path),
    dtype,
  });
}

function finiteNumber(x: unknown, path: number[], dtype: DType): number {
  if (typeof x === 'number' && Number.isFinite(x)) return x;
  if (typeof x === 'boolean') throw badElement(path, x, dtype, "numbers (use dtype 'bool' for booleans)");
  throw badElement(path, x, dtype, 'finite numbers');
}

function outOfRange(path: number[], x: unknown, dtype: DType, range: string): Error {
  return tgError(
    'BAD_TENSOR',
    `element ${formatPath(path)} is ${describe(x)}, outside the range of ${dtype} (${range})`,
    {
      path: formatPath(path),
      dtype,
    },
  );
}

function floatWriter(dtype: DType, data: Uint8Array): Writer {
  const max = FLOAT_MAX[dtype] ?? '';
  if (dtype === 'float64') {
    const out = new Float64Array(data.buffer, data.byteOffset, data.byteLength / 8);
    return (i, x, path) => {
      out[i] = finiteNumber(x, path, dtype);
    };
  }
  if (dtype === 'float32') {
    const out = new Float32Array(data.buffer, data.byteOffset, data.byteLength / 4);
    return (i, x, path) => {
      const v = Math.fround(finiteNumber(x, path, dtype));
      if (!Number.isFinite(v)) throw outOfRange(path, x, dtype, `max magnitude ${max}`);
      out[i] = v;
    };
  }
  const out = new Uint16Array(data.buffer, data.byteOffset, data.byteLength / 2);
  const encode = dtype === 'float16' ? floatToHalfBits : floatToBfloat16Bits;
  const expMask = dtype === 'float16' ? 0x7c00 : 0x7f80;
  return (i, x, path) => {
    const bits = encode(finiteNumber(x, path, dtype));
    if ((bits & expMask) === expMask) throw outOfRange(path, x, dtype, `max magnitude ${max}`);
    out[i] = bits;
  };
}

function intWriter(dtype: DType, data: Uint8Array): Writer {
  const [lo, hi] = INT_RANGES[dtype] ?? [0, 0];
  const check = (x: unknown, path: number[]): number => {
    const v = finiteNumber(x, path, dtype);
    if (!Number.isInteger(v)) throw badElement(path, x, dtype, 'integers');
    if (v < lo || v > hi) {
      const hint = dtype === 'int64' ? '; larger int64 values are not exact as JSON numbers, send them as b64' : '';
      throw outOfRange(path, x, dtype, `${lo}..${hi}${hint}`);
    }
    return v;
  };
  if (dtype === 'int64') {
    const out = new BigInt64Array(data.buffer, data.byteOffset, data.byteLength / 8);
    return (i, x, path) => {
      if (typeof x === 'bigint') {
        if (x < INT64_MIN || x > INT64_MAX) throw outOfRange(path, x, dtype, `${INT64_MIN}..${INT64_MAX}`);
        out[i] = x;
      } else {
        out[i] = BigInt(check(x, path));
      }
    };
  }
  const Ctor = { int8: Int8Array, uint8: Uint8Array, int16: Int16Array, int32: Int32Array }[dtype as 'int8'];
  const out = new Ctor(data.buffer, data.byteOffset, data.byteLength / dtypeSize(dtype));
  return (i, x, path) => {
    out[i] = check(x, path);
  };
}

function boolWriter(data: Uint8Array): Writer {
  return (i, x, path) => {
    if (x === true || x === 1) data[i] = 1;
    else if (x === false || x === 0) data[i] = 0;
    else throw badElement(path, x, 'bool', 'true/false (or 1/0)');
  };
}

function writerFor(dtype: DType, data: Uint8Array): Writer {
  if (dtype === 'bool') return boolWriter(data);
  if (dtype in INT_RANGES) return intWriter(dtype, data);
  return floatWriter(dtype, data);
}

/** A JSON value (a number, or a rectangular nested array of numbers) as a tensor of `dtype`. */
export function fromNestedArray(value: unknown, dtype: DType, opts: FromNestedArrayOptions = {}): Tensor {
  if (!isDType(dtype)) {
    throw tgError('BAD_TENSOR', `unknown dtype ${JSON.stringify(dtype)}; use one of ${DTYPES.join(', ')}`, { dtype });
  }
  const shape: number[] = [];
  for (let v = value; Array.isArray(v); v = v[0]) {
    // Checked while descending, before any recursion: a hostile array may be nested 10^6 deep.
    if (shape.length === MAX_RANK)
      throw tgError(
        'BAD_TENSOR',
        `the array is nested more than ${MAX_RANK} deep; a tensor has at most ${MAX_RANK} dimensions`,
        { maxRank: MAX_RANK },
      );
    shape.push(v.length);
    if (v.length === 0) break;
  }
  const count = numel(shape);
  const max = opts.maxElements ?? Number.POSITIVE_INFINITY;
  if (count > max) {
    throw tgError(
      'INPUT_TOO_LARGE',
      `a nested array of shape [${shape.join(',')}] has ${count} elements, over the limit of ${max} for inline arrays; ` +
        'send larger tensors as {dtype, shape, b64}, a .npy or .safetensors file path, or a tensor:// handle',
      { shape, elements: count, maxElements: max },
    );
  }
  const data = new Uint8Array(count * dtypeSize(dtype));
  const write = writerFor(dtype, data);
  const path: number[] = [];
  let next = 0;
  const walk = (node: unknown, depth: number): void => {
    if (depth === shape.length) {
      if (Array.isArray(node)) {
        throw tgError(
          'BAD_TENSOR',
          `element ${formatPath(path)} is an array but ${formatPath(path.map(() => 0))} is not; ` +
            'all elements must be nested to the same depth',
          { path: formatPath(path) },
        );
      }
      write(next++, node, path);
      return;
    }
    const want = shape[depth] as number;
    const first = formatPath(path.map(() => 0));
    if (!Array.isArray(node)) {
      throw tgError(
        'BAD_TENSOR',
        `${formatPath(path)} is ${describe(node)} but ${first} is an array of length ${want}; ` +
          `the array is ragged at dimension ${depth}: every entry must be nested to the same depth`,
        { path: formatPath(path), dimension: depth },
      );
    }
    if (node.length !== want) {
      throw tgError(
        'BAD_TENSOR',
        `ragged array at dimension ${depth}: ${formatPath(path)} has length ${node.length} but ${first} has ` +
          `length ${want}; every row along a dimension must have the same length`,
        { path: formatPath(path), dimension: depth, length: node.length, expected: want },
      );
    }
    for (let j = 0; j < want; j++) {
      path.push(j);
      walk(node[j], depth + 1);
      path.pop();
    }
  };
  walk(value, 0);
  return { dtype, shape, data };
}

/** Nests flat row-major `values` into `shape`; rank 0 gives the single value. */
export function nestFlat<T>(values: ArrayLike<T>, shape: readonly number[]): Nested<T> {
  let i = 0;
  const build = (depth: number): Nested<T> => {
    if (depth === shape.length) return values[i++] as T;
    const n = shape[depth] as number;
    const out: Nested<T>[] = new Array(n);
    for (let j = 0; j < n; j++) out[j] = build(depth + 1);
    return out;
  };
  return build(0);
}

/** The tensor as nested arrays of numbers (booleans for bool); int64 beyond 2^53 loses precision. */
export function toNestedArray(t: Tensor): NestedArray {
  const read = numberReader(t);
  const n = numel(t.shape);
  const flat: (number | boolean)[] = new Array(n);
  for (let i = 0; i < n; i++) flat[i] = t.dtype === 'bool' ? read(i) !== 0 : read(i);
  return nestFlat(flat, t.shape);
}
