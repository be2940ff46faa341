import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DTYPES } from '../../../src/tensor/dtype.js';
import { fromNestedArray, nestFlat, toNestedArray } from '../../../src/tensor/nested.js';
import { typedView } from '../../../src/tensor/tensor.js';
import { SAMPLES, throwsCode } from './helpers.js';

test('every dtype round-trips through nested arrays', () => {
  for (const dtype of DTYPES) {
    const [a, b, c, d] = SAMPLES[dtype];
    const value = [
      [a, b],
      [c, d],
    ];
    const t = fromNestedArray(value, dtype);
    assert.deepEqual(t.shape, [2, 2], dtype);
    assert.equal(t.data.byteLength, 4 * (dtype === 'bool' ? 1 : typedView(t).BYTES_PER_ELEMENT), dtype);
    assert.deepEqual(toNestedArray(t), value, dtype);
  }
});

test('bytes are little-endian in the dtype', () => {
  assert.deepEqual([...fromNestedArray([1, -2], 'float32').data], [0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]);
  assert.deepEqual([...fromNestedArray([1], 'float16').data], [0x00, 0x3c]);
  assert.deepEqual([...fromNestedArray([1], 'bfloat16').data], [0x80, 0x3f]);
  assert.deepEqual([...fromNestedArray([-2], 'int64').data], [0xfe, 255, 255, 255, 255, 255, 255, 255]);
  assert.deepEqual([...fromNestedArray([true, false, 1, 0], 'bool').data], [1, 0, 1, 0]);
});

test('floats round to the dtype, ties to even', () => {
  assert.deepEqual(toNestedArray(fromNestedArray([0.1, 65519], 'float16')), [0.0999755859375, 65504]);
  assert.deepEqual([...new Uint16Array(fromNestedArray([0.1], 'bfloat16').data.buffer)], [0x3dcd]);
  assert.deepEqual(toNestedArray(fromNestedArray([0.1], 'float32')), [Math.fround(0.1)]);
  assert.deepEqual(toNestedArray(fromNestedArray([-0], 'float32')), [-0]);
});

test('shapes: scalars are rank 0, empty arrays keep their dimensions', () => {
  const s = fromNestedArray(3.5, 'float32');
  assert.deepEqual(s.shape, []);
  assert.equal(toNestedArray(s), 3.5);
  assert.equal(toNestedArray(fromNestedArray(true, 'bool')), true);
  assert.deepEqual(fromNestedArray([], 'float32').shape, [0]);
  assert.deepEqual(fromNestedArray([[], []], 'int8').shape, [2, 0]);
  assert.deepEqual(toNestedArray(fromNestedArray([[], []], 'int8')), [[], []]);
  assert.deepEqual(fromNestedArray([[[1], [2], [3]]], 'int32').shape, [1, 3, 1]);
});

test('int64 accepts bigint within range', () => {
  const t = fromNestedArray([2n ** 63n - 1n, -(2n ** 63n)], 'int64');
  assert.deepEqual([...new BigInt64Array(t.data.buffer)], [2n ** 63n - 1n, -(2n ** 63n)]);
  throwsCode(() => fromNestedArray([2n ** 63n], 'int64'), 'BAD_TENSOR', /\[0\]/, /outside the range of int64/);
});

test('ragged arrays name the path and the dimension', () => {
  const err = throwsCode(
    () =>
      fromNestedArray(
        [
          [1, 2, 3],
          [4, 5],
        ],
        'float32',
      ),
    'BAD_TENSOR',
    /ragged array at dimension 1: \[1\] has length 2 but \[0\] has length 3/,
    /same length/,
  );
  assert.equal(err.data.path, '[1]');
  assert.equal(err.data.dimension, 1);
  throwsCode(
    () => fromNestedArray([[1, 2], 3], 'float32'),
    'BAD_TENSOR',
    /\[1\] is 3 but \[0\] is an array of length 2/,
  );
  throwsCode(
    () => fromNestedArray([[1, [2]]], 'float32'),
    'BAD_TENSOR',
    /element \[0\]\[1\] is an array/,
    /same depth/,
  );
  throwsCode(
    () => fromNestedArray([[[1, 2]], [[3]]], 'float32'),
    'BAD_TENSOR',
    /dimension 2: \[1\]\[0\] has length 1 but \[0\]\[0\] has length 2/,
  );
});

test('bad elements name their path and say what the dtype needs', () => {
  const err = throwsCode(
    () => fromNestedArray([[1, 2, 3, 'x']], 'float32'),
    'BAD_TENSOR',
    /element \[0\]\[3\] is a string \("x"\); dtype float32 needs finite numbers/,
  );
  assert.equal(err.data.path, '[0][3]');
  throwsCode(() => fromNestedArray([1, null], 'float32'), 'BAD_TENSOR', /\[1\] is null/);
  throwsCode(() => fromNestedArray([1, {}], 'float32'), 'BAD_TENSOR', /\[1\] is an object/);
  throwsCode(() => fromNestedArray([Number.NaN], 'float64'), 'BAD_TENSOR', /\[0\] is NaN; dtype float64 needs finite/);
  throwsCode(() => fromNestedArray([1, Number.POSITIVE_INFINITY], 'float32'), 'BAD_TENSOR', /\[1\] is Infinity/);
  throwsCode(() => fromNestedArray([true], 'float32'), 'BAD_TENSOR', /boolean/, /use dtype 'bool'/);
  throwsCode(() => fromNestedArray('abc', 'float32'), 'BAD_TENSOR', /the value is a string/);
  throwsCode(() => fromNestedArray([2], 'bool'), 'BAD_TENSOR', /\[0\] is 2; dtype bool needs true\/false \(or 1\/0\)/);
});

test('integers must be whole and in range', () => {
  throwsCode(() => fromNestedArray([1, 1.5], 'int32'), 'BAD_TENSOR', /\[1\] is 1.5; dtype int32 needs integers/);
  throwsCode(
    () => fromNestedArray([128], 'int8'),
    'BAD_TENSOR',
    /\[0\] is 128, outside the range of int8 \(-128..127\)/,
  );
  throwsCode(() => fromNestedArray([-1], 'uint8'), 'BAD_TENSOR', /uint8 \(0..255\)/);
  throwsCode(() => fromNestedArray([40000], 'int16'), 'BAD_TENSOR', /int16/);
  throwsCode(() => fromNestedArray([2 ** 31], 'int32'), 'BAD_TENSOR', /int32/);
  throwsCode(() => fromNestedArray([2 ** 53], 'int64'), 'BAD_TENSOR', /int64/, /send them as b64/);
});

test('floats past the dtype range are refused instead of becoming infinity', () => {
  throwsCode(
    () => fromNestedArray([70000], 'float16'),
    'BAD_TENSOR',
    /outside the range of float16 \(max magnitude 65504\)/,
  );
  throwsCode(() => fromNestedArray([-1e39], 'float32'), 'BAD_TENSOR', /float32/);
  throwsCode(() => fromNestedArray([3.4e38], 'bfloat16'), 'BAD_TENSOR', /bfloat16/);
  assert.deepEqual(toNestedArray(fromNestedArray([3.4e38], 'float32')), [Math.fround(3.4e38)]);
});

test('maxElements is enforced before anything is allocated', () => {
  const row = new Array(1_000_000).fill(0);
  const huge = new Array(1_000_000).fill(row); // claims 10^12 elements
  const err = throwsCode(
    () => fromNestedArray(huge, 'float32', { maxElements: 1_000_000 }),
    'INPUT_TOO_LARGE',
    /shape \[1000000,1000000\] has 1000000000000 elements, over the limit of 1000000/,
    /b64/,
  );
  assert.equal(err.data.maxElements, 1_000_000);
  assert.doesNotThrow(() => fromNestedArray([1, 2, 3], 'float32', { maxElements: 3 }));
  throwsCode(() => fromNestedArray([1, 2, 3, 4], 'float32', { maxElements: 3 }), 'INPUT_TOO_LARGE');
});

test('unknown dtype is refused', () => {
  throwsCode(() => fromNestedArray([1], 'float' as 'float32'), 'BAD_TENSOR', /unknown dtype "float"/);
});

test('nestFlat shapes flat values', () => {
  assert.deepEqual(nestFlat([1, 2, 3, 4, 5, 6], [2, 3]), [
    [1, 2, 3],
    [4, 5, 6],
  ]);
  assert.deepEqual(nestFlat(['a'], []), 'a');
  assert.deepEqual(nestFlat([], [0, 2]), []);
});
