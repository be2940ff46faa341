import assert from 'node:assert/strict';
import { type ErrorCode, TensorgateError } from '../../../src/errors.js';

/** Asserts that `fn` throws a TensorgateError with `code` and a message matching every pattern. */
export function throwsCode(fn: () => unknown, code: ErrorCode, ...patterns: RegExp[]): TensorgateError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof TensorgateError, `expected a TensorgateError ${code}, got ${String(caught)}`);
  assert.equal(caught.code, code, caught.message);
  for (const p of patterns) assert.match(caught.message, p);
  return caught;
}

/** Sample values per dtype, 4 each, covering extremes that the dtype represents exactly. */
export const SAMPLES = {
  float32: [1.5, -2.25, 3.4028234663852886e38, 1.401298464324817e-45],
  float64: [Math.PI, -1e300, 5e-324, 0],
  float16: [1, -2, 65504, 2 ** -24],
  bfloat16: [1, -3.140625, 3.3895313892515355e38, 2 ** -133],
  int8: [-128, 127, 0, 5],
  uint8: [0, 255, 1, 2],
  int16: [-32768, 32767, 0, -1],
  int32: [-2147483648, 2147483647, 0, 7],
  int64: [-(2 ** 53 - 1), 2 ** 53 - 1, 0, -1],
  bool: [true, false, true, true],
} as const;
