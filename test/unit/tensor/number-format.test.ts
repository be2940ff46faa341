import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  bfloat16BitsToFloat,
  floatToBfloat16Bits,
  floatToHalfBits,
  halfBitsToFloat,
} from '../../../src/tensor/half.js';
import { compactNumber } from '../../../src/tensor/number-format.js';

/**
 * The definition: the first number of significant digits whose decimal rounds back to `x`; a whole
 * number stays as it is (65504, not the equally exact 65500).
 */
function shortestByDefinition(x: number, digits: number, round: (y: number) => number): number {
  if (Number.isInteger(x)) return x;
  for (let p = 1; p <= digits; p++) {
    const y = Number(x.toPrecision(p));
    if (round(y) === x) return y;
  }
  return x;
}

const roundHalf = (y: number) => halfBitsToFloat(floatToHalfBits(y));
const roundBfloat16 = (y: number) => bfloat16BitsToFloat(floatToBfloat16Bits(y));

describe('compactNumber', () => {
  it('gives the shortest decimal that rounds back, for every float16 and bfloat16 value', () => {
    for (let bits = 0; bits < 65536; bits++) {
      const half = halfBitsToFloat(bits);
      if (Number.isFinite(half))
        assert.equal(compactNumber(half, 'float16'), shortestByDefinition(half, 5, roundHalf), `float16 ${bits}`);
      const bf = bfloat16BitsToFloat(bits);
      if (Number.isFinite(bf))
        assert.equal(compactNumber(bf, 'bfloat16'), shortestByDefinition(bf, 4, roundBfloat16), `bfloat16 ${bits}`);
    }
  });

  it('gives the shortest decimal that rounds back for float32: every power of two, and a spread of values', () => {
    const values = new Float32Array(200_000);
    const bits = new Uint32Array(values.buffer);
    // Every exponent and many mantissas: a fixed-step walk over the bit patterns.
    for (let i = 0; i < bits.length; i++) bits[i] = Math.imul(i, 2654435761) >>> 0;
    const cases = [...values, ...Array.from({ length: 277 }, (_, i) => Math.fround(2 ** (i - 149)))];
    for (const x of cases) {
      if (!Number.isFinite(x)) continue;
      assert.equal(compactNumber(x, 'float32'), shortestByDefinition(x, 9, Math.fround), `float32 ${x}`);
      assert.equal(Math.fround(compactNumber(x, 'float32')), x);
    }
  });

  it('leaves whole numbers, non-finite values and float64 as they are', () => {
    assert.equal(compactNumber(65504, 'float16'), 65504);
    assert.equal(compactNumber(Number.POSITIVE_INFINITY, 'float32'), Number.POSITIVE_INFINITY);
    assert.ok(Number.isNaN(compactNumber(Number.NaN, 'float32')));
    assert.equal(compactNumber(0.1, 'float64'), 0.1);
    assert.equal(compactNumber(Math.fround(0.1), 'float32'), 0.1);
  });
});
