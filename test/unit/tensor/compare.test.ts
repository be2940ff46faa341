import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { checkOutput, describeCheck, fmt3, worstCheck } from '../../../src/tensor/compare.js';
import type { DType } from '../../../src/tensor/dtype.js';
import { fromNestedArray } from '../../../src/tensor/nested.js';
import type { Tensor } from '../../../src/tensor/tensor.js';
import { ROOT } from '../../helpers/models.js';

/**
 * The accuracy rules that judge a variant against fp32 (ONNX exports here; the worker's variants
 * in Python): the cases both implementations share, and the messages.
 */

interface Case {
  name: string;
  dtype: DType;
  labels: boolean;
  expected: unknown;
  actual: unknown;
  tolerance: number;
  rule: string;
  within: boolean;
  changed?: number;
  error?: number;
}

const { cases } = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/accuracy-cases.json'), 'utf8')) as {
  cases: Case[];
};
/** A tensor of the case's values; they may hold NaN and infinities, which JSON writes as strings. */
function tensorOf(values: unknown, dtype: DType): Tensor {
  const shape: number[] = [];
  for (let v = values; Array.isArray(v); v = v[0]) shape.push(v.length);
  const flat = (values as unknown[]).flat(8).map(Number);
  const data =
    dtype === 'float64'
      ? new Float64Array(flat)
      : dtype === 'int64'
        ? BigInt64Array.from(flat, (n) => BigInt(n))
        : dtype === 'int32'
          ? new Int32Array(flat)
          : new Float32Array(flat);
  return { dtype, shape, data: new Uint8Array(data.buffer) };
}

for (const c of cases)
  test(`shared case: ${c.name}`, () => {
    const spec = { name: 'out', dtype: c.dtype, labels: c.labels ? ['a', 'b', 'c'] : undefined };
    const check = checkOutput(spec, tensorOf(c.actual, c.dtype), tensorOf(c.expected, c.dtype), c.tolerance);
    assert.equal(check.rule, c.rule);
    assert.equal(check.within, c.within, JSON.stringify(check));
    if (c.changed !== undefined) assert.equal(check.changed, c.changed, JSON.stringify(check));
    if (c.error !== undefined)
      assert.ok(Math.abs(check.error - c.error) <= 1e-3 * c.error + 1e-9, JSON.stringify(check));
  });

test('the worst output is the one furthest past its tolerance; a changed answer is worst of all', () => {
  const f32 = (v: number[][]) => fromNestedArray(v, 'float32');
  const small = checkOutput({ name: 'a', dtype: 'float32' }, f32([[0, 1.001]]), f32([[0, 1]]), 0.01);
  const big = checkOutput({ name: 'b', dtype: 'float32' }, f32([[0, 1.005]]), f32([[0, 1]]), 0.01);
  const flipped = checkOutput({ name: 'c', dtype: 'float32', labels: ['x', 'y'] }, f32([[1, 0.2]]), f32([[0, 1]]), 0.9);
  assert.equal(worstCheck([small, big])?.output, 'b');
  assert.equal(worstCheck([big, flipped, small])?.output, 'c');
  assert.match(
    describeCheck(flipped),
    /^output "c" is off from fp32 by up to 1, 1 of its range \(tolerance 0\.9\); the top class of 1 of 1 rows changed$/,
  );
});

test('numbers read as Python writes them with :.3g', () => {
  assert.deepEqual([0.005, 1.234e-5, 1234.5, 100, 0.0001, 2.98e-8, 0.12345].map(fmt3), [
    '0.005',
    '1.23e-05',
    '1.23e+03',
    '100',
    '0.0001',
    '2.98e-08',
    '0.123',
  ]);
});
