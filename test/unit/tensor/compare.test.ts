import assert from 'node:assert/strict';
import { test } from 'node:test';
import { outputError } from '../../../src/tensor/compare.js';

/** The accuracy checks' comparison (ONNX exports, precision variants): element by element, |actual - expected| <= tolerance * (1 + |expected|). */

const f32 = (values: number[], shape = [values.length]) => ({
  dtype: 'float32' as const,
  shape,
  data: new Uint8Array(new Float32Array(values).buffer),
});

test('an export within the tolerance passes, and the largest errors are reported', () => {
  const e = outputError('y', f32([1, 100.0001, -2]), f32([1, 100, -2]), 1e-4);
  assert.equal(e.within, true);
  assert.ok(Math.abs(e.maxAbs - 1e-4) < 1e-5, String(e.maxAbs));
  assert.ok(Math.abs(e.maxRel - 1e-6) < 1e-6, String(e.maxRel));
});

test('one element past the tolerance fails the output, scaled by its own size', () => {
  // 0.01 off on 1000 is within 1e-4 * 1001; 0.01 off on 0.5 is not.
  assert.equal(outputError('y', f32([1000.01, 0.5]), f32([1000, 0.5]), 1e-4).within, true);
  assert.equal(outputError('y', f32([1000, 0.51]), f32([1000, 0.5]), 1e-4).within, false);
  // NaN where PyTorch has a number is never within.
  assert.equal(outputError('y', f32([Number.NaN]), f32([1]), 1).within, false);
});

test('another shape is a mismatch, whatever the values', () => {
  const e = outputError('y', f32([1, 2], [1, 2]), f32([1, 2], [2, 1]), 1);
  assert.deepEqual([e.within, e.maxAbs], [false, Number.POSITIVE_INFINITY]);
});
