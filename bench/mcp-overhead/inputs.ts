import { writeFileSync } from 'node:fs';

/**
 * The benchmark input in every form the `infer` tool takes, all holding the same float32 values:
 * a `.npy` file, `{b64, shape, dtype}`, and a nested JSON array (the numbers a Python client's
 * `tolist()` would send: float32 values printed as doubles).
 */

export interface BenchInput {
  shape: number[];
  bytes: number;
  path: string;
  b64: { b64: string; shape: number[]; dtype: 'float32' };
  array: unknown[];
}

/** Deterministic values in [-1, 1): mulberry32, so every run sends the same tensor. */
function randomFloats(n: number, seed = 1234): Float32Array {
  const out = new Float32Array(n);
  let a = seed >>> 0;
  for (let i = 0; i < n; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = (((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1;
  }
  return out;
}

function npyBytes(data: Float32Array, shape: number[]): Buffer {
  const dict = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  const unpadded = 10 + dict.length + 1;
  const headerLen = dict.length + 1 + ((64 - (unpadded % 64)) % 64);
  const header = Buffer.alloc(10 + headerLen, 0x20);
  header.write('\x93NUMPY', 0, 'latin1');
  header[6] = 1;
  header[7] = 0;
  header.writeUInt16LE(headerLen, 8);
  header.write(dict, 10, 'latin1');
  header[header.length - 1] = 0x0a;
  return Buffer.concat([header, Buffer.from(data.buffer, data.byteOffset, data.byteLength)]);
}

function nest(flat: Float32Array, shape: number[], offset = 0): unknown[] {
  const [dim, ...rest] = shape as [number, ...number[]];
  if (rest.length === 0) return Array.from(flat.subarray(offset, offset + dim));
  const stride = rest.reduce((a, b) => a * b, 1);
  return Array.from({ length: dim }, (_, i) => nest(flat, rest, offset + i * stride));
}

export function makeInput(path: string, shape: number[]): BenchInput {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = randomFloats(n);
  writeFileSync(path, npyBytes(data, shape));
  const raw = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return {
    shape,
    bytes: raw.byteLength,
    path,
    b64: { b64: raw.toString('base64'), shape, dtype: 'float32' },
    array: nest(data, shape),
  };
}
