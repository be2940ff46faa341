import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  byteLength,
  checkShape,
  formatType,
  makeTensor,
  numberReader,
  numel,
  toNumbers,
  typedView,
} from '../../../src/tensor/tensor.js';
import { throwsCode } from './helpers.js';

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

test('numel and byteLength', () => {
  assert.equal(numel([]), 1);
  assert.equal(numel([3]), 3);
  assert.equal(numel([2, 0, 5]), 0);
  assert.equal(numel([1, 3, 224, 224]), 150528);
  assert.equal(byteLength('float32', [1, 3, 224, 224]), 602112);
  assert.equal(byteLength('bool', [7]), 7);
  assert.equal(byteLength('int64', []), 8);
  assert.equal(formatType('float16', [2, 3]), 'float16[2,3]');
});

test('makeTensor wraps the bytes without copying', () => {
  const data = bytesOf(new Float32Array([1, 2, 3, 4]));
  const t = makeTensor('float32', [2, 2], data);
  assert.equal(t.data, data);
  assert.deepEqual(t.shape, [2, 2]);
});

test('makeTensor refuses a wrong byte length with expected vs given and a hint', () => {
  const err = throwsCode(
    () => makeTensor('float32', [1, 3, 2, 2], new Uint8Array(47)),
    'BYTE_LENGTH_MISMATCH',
    /float32\[1,3,2,2\] needs 48 bytes \(12 elements x 4 bytes\) but got 47/,
    /little-endian row-major/,
  );
  assert.deepEqual(err.data, { dtype: 'float32', shape: [1, 3, 2, 2], expected: 48, got: 47 });
});

test('makeTensor and checkShape refuse bad shapes and dtypes', () => {
  throwsCode(() => makeTensor('float32', [2, -1], new Uint8Array(0)), 'BAD_TENSOR', /shape\[1\] is -1/, />= 0/);
  throwsCode(() => makeTensor('float32', [1.5], new Uint8Array(0)), 'BAD_TENSOR', /shape\[0\] is 1.5/);
  throwsCode(() => makeTensor('float32', ['2'] as unknown as number[], new Uint8Array(8)), 'BAD_TENSOR', /"2"/);
  throwsCode(() => checkShape('2,2'), 'BAD_TENSOR', /array of non-negative integers/);
  throwsCode(() => checkShape([2 ** 30, 2 ** 30]), 'BAD_TENSOR', /too many elements/);
  throwsCode(
    () => makeTensor('float8' as 'float32', [1], new Uint8Array(1)),
    'BAD_TENSOR',
    /unknown dtype "float8"; use one of float32, float64/,
  );
});

test('typedView is zero-copy when aligned and copies when not', () => {
  const f = new Float32Array([1.5, -2, 3.25]);
  const aligned = makeTensor('float32', [3], bytesOf(f));
  const view = typedView(aligned);
  assert.ok(view instanceof Float32Array);
  assert.equal(view.buffer, f.buffer);
  const shifted = new Uint8Array(13);
  shifted.set(bytesOf(f), 1);
  const unaligned = makeTensor('float32', [3], shifted.subarray(1));
  const copy = typedView(unaligned);
  assert.notEqual(copy.buffer, shifted.buffer);
  assert.deepEqual([...copy], [1.5, -2, 3.25]);
  assert.deepEqual([...toNumbers(unaligned)], [1.5, -2, 3.25]);
});

test('toNumbers converts every dtype', () => {
  const cases: [Parameters<typeof makeTensor>[0], ArrayBufferView, number[]][] = [
    ['float32', new Float32Array([0.5, -1, 3e38]), [0.5, -1, Math.fround(3e38)]],
    ['float64', new Float64Array([Math.PI, -1e300, 5e-324]), [Math.PI, -1e300, 5e-324]],
    ['float16', new Uint16Array([0x3c00, 0x7bff, 0xc000]), [1, 65504, -2]],
    ['bfloat16', new Uint16Array([0x3f80, 0x4049, 0xbf80]), [1, 3.140625, -1]],
    ['int8', new Int8Array([-128, 127, 0]), [-128, 127, 0]],
    ['uint8', new Uint8Array([0, 255, 7]), [0, 255, 7]],
    ['int16', new Int16Array([-32768, 32767, 1]), [-32768, 32767, 1]],
    ['int32', new Int32Array([-(2 ** 31), 2 ** 31 - 1, 2]), [-(2 ** 31), 2 ** 31 - 1, 2]],
    ['int64', new BigInt64Array([-(2n ** 53n), 2n ** 62n, 3n]), [-(2 ** 53), 2 ** 62, 3]],
    ['bool', new Uint8Array([0, 1, 2]), [0, 1, 1]],
  ];
  for (const [dtype, view, want] of cases) {
    const t = makeTensor(dtype, [3], bytesOf(view));
    assert.deepEqual([...toNumbers(t)], want, dtype);
    const read = numberReader(t);
    assert.deepEqual([read(0), read(1), read(2)], want, dtype);
  }
});

test('toNumbers reads a view inside a larger buffer at its own offset', () => {
  const all = new Float64Array([9, 1, 2, 9]);
  const t = makeTensor('float64', [2], new Uint8Array(all.buffer, 8, 16));
  assert.deepEqual([...toNumbers(t)], [1, 2]);
});
