import assert from 'node:assert/strict';
import { closeSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openAllowedFile } from '../../../src/security/confined-files.js';
import { base64Source } from '../../../src/tensor/base64.js';
import { encodeNpy } from '../../../src/tensor/npy.js';
import { encodeSafetensors } from '../../../src/tensor/safetensors.js';
import { npyFileSource, safetensorsFileSource } from '../../../src/tensor/tensor-file.js';

const dir = mkdtempSync(join(tmpdir(), 'tg-src-'));

/** A .npy file source as a request makes one: the file opened under the allowed roots. */
function npySource(path: string) {
  const { file, fd } = openAllowedFile('x', path, [dir]);
  try {
    return npyFileSource(file, fd);
  } finally {
    closeSync(fd);
  }
}
/** One tensor of a .safetensors file as a request makes its source; `offered` gets the names the file offered. */
function safetensorsSource(path: string, name?: string, offered: string[][] = []) {
  const { file, fd } = openAllowedFile('x', path, [dir]);
  try {
    return safetensorsFileSource(file, fd, (names) => {
      offered.push(names);
      return name ?? (names[0] as string);
    });
  } finally {
    closeSync(fd);
  }
}
const values = new Float32Array([1.5, -2, 3.25, 4]);
const tensor = { dtype: 'float32' as const, shape: [2, 2], data: new Uint8Array(values.buffer) };

test('a .npy source checks the header now and reads the data into the target later', () => {
  const path = join(dir, 'x.npy');
  const big = new Float32Array(2 * 1024).map((_, i) => i / 4); // 8 KiB: more than the header's read
  const npy = encodeNpy({ dtype: 'float32', shape: [2, 1024], data: new Uint8Array(big.buffer) });
  writeFileSync(path, npy);
  const source = npySource(path);
  assert.deepEqual(
    [source.dtype, source.shape, source.byteLength, source.data],
    ['float32', [2, 1024], 8192, undefined],
  );
  const target = new Uint8Array(8192 + 16).fill(7);
  source.fill(target.subarray(8, 8200));
  assert.deepEqual(new Float32Array(target.slice(8, 8200).buffer), big);
  assert.equal(target[7], 7, 'nothing written outside the target');
  assert.equal(target[8200], 7, 'nothing written outside the target');
  rmSync(path);
  assert.throws(() => source.fill(new Uint8Array(8192)), { code: 'FILE_NOT_FOUND' });
});

test('a .npy file of at most 4 KiB is read whole with its header, and not opened again', () => {
  const path = join(dir, 'small.npy');
  const npy = encodeNpy(tensor);
  writeFileSync(path, npy);
  const source = npySource(path);
  assert.deepEqual([source.dtype, source.shape, source.byteLength], ['float32', [2, 2], 16]);
  assert.deepEqual([...new Float32Array(Uint8Array.from(source.data ?? []).buffer)], [...values]);
  rmSync(path); // already read: the source does not need the file any more
  const target = new Uint8Array(16);
  source.fill(target);
  assert.deepEqual([...new Float32Array(target.buffer)], [...values]);
});

test('a .npy header longer than the first read (version 2.0) is read whole', () => {
  const path = join(dir, 'long.npy');
  const dict = `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }`.padEnd(6000 - 13, ' ');
  const header = Buffer.alloc(12);
  Buffer.from('\x93NUMPY', 'latin1').copy(header);
  header[6] = 2;
  header[7] = 0;
  header.writeUInt32LE(dict.length + 1, 8);
  const file = Buffer.concat([header, Buffer.from(`${dict}\n`, 'latin1'), Buffer.from(values.buffer)]);
  writeFileSync(path, file);
  const target = new Uint8Array(16);
  npySource(path).fill(target);
  assert.deepEqual([...new Float32Array(target.buffer)], [...values]);
});

test('a truncated .npy file is refused before any data is read', () => {
  const path = join(dir, 'short.npy');
  const npy = encodeNpy(tensor).subarray(0, -4);
  writeFileSync(path, npy);
  assert.throws(() => npySource(path), { code: 'BAD_TENSOR', message: /truncated/ });
});

test('a .safetensors source checks the whole header now and reads only the chosen tensor later', () => {
  const path = join(dir, 'x.safetensors');
  const big = new Float32Array(2 * 1024).map((_, i) => i / 4);
  const ids = new Int32Array([7, -1, 42]);
  writeFileSync(
    path,
    encodeSafetensors({
      features: { dtype: 'float32', shape: [2, 1024], data: new Uint8Array(big.buffer) },
      ids: { dtype: 'int32', shape: [3], data: new Uint8Array(ids.buffer) },
    }),
  );
  const offered: string[][] = [];
  const source = safetensorsSource(path, 'features', offered);
  assert.deepEqual(offered, [['features', 'ids']]);
  assert.deepEqual(
    [source.dtype, source.shape, source.byteLength, source.data, source.file?.what],
    ['float32', [2, 1024], 8192, undefined, `${path} tensor "features"`],
  );
  const target = new Uint8Array(8192 + 16).fill(7);
  source.fill(target.subarray(8, 8200));
  assert.deepEqual(new Float32Array(target.slice(8, 8200).buffer), big);
  assert.equal(target[7], 7, 'nothing written outside the target');
  assert.equal(target[8200], 7, 'nothing written outside the target');
  const second = new Uint8Array(12);
  safetensorsSource(path, 'ids').fill(second);
  assert.deepEqual([...new Int32Array(second.buffer)], [...ids]);
  rmSync(path);
  assert.throws(() => source.fill(new Uint8Array(8192)), { code: 'FILE_NOT_FOUND' });
});

test('a .safetensors file of at most 4 KiB is read whole now; a truncated one is refused before any data is read', () => {
  const path = join(dir, 'small.safetensors');
  writeFileSync(path, encodeSafetensors({ x: tensor }));
  const source = safetensorsSource(path);
  rmSync(path);
  const target = new Uint8Array(16);
  source.fill(target);
  assert.deepEqual([...new Float32Array(target.buffer)], [...values]);
  const big = new Float32Array(2048);
  writeFileSync(
    path,
    encodeSafetensors({ x: { dtype: 'float32', shape: [2048], data: new Uint8Array(big.buffer) } }).subarray(0, -4),
  );
  assert.throws(() => safetensorsSource(path), { code: 'BAD_TENSOR', message: /truncated/ });
  rmSync(path);
});

test('a base64 source is length-checked now and reports a stray character when decoded', () => {
  const good = Buffer.from(values.buffer).toString('base64');
  const target = new Uint8Array(16);
  base64Source('float32', [2, 2], good).fill(target);
  assert.deepEqual([...new Float32Array(target.buffer)], [...values]);
  assert.throws(() => base64Source('float32', [2, 3], good), { code: 'BYTE_LENGTH_MISMATCH' });
  const bad = `${good.slice(0, 5)}*${good.slice(6)}`;
  const source = base64Source('float32', [2, 2], bad);
  assert.throws(() => source.fill(new Uint8Array(16)), { code: 'BAD_TENSOR', message: /base64/ });
});
