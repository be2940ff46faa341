/**
 * Short, exact number text for summaries: an element of a float32 tensor is printed with the fewest
 * digits that still round-trip to the same float32 (0.1, not 0.10000000149011612), which keeps
 * summaries small for an agent without changing any value.
 */
import type { DType } from './dtype.js';
import { bfloat16BitsToFloat, floatToBfloat16Bits, floatToHalfBits, halfBitsToFloat } from './half.js';

const ROUND_TRIP: Partial<Record<DType, [digits: number, round: (x: number) => number]>> = {
  float32: [9, Math.fround],
  float16: [5, (x) => halfBitsToFloat(floatToHalfBits(x))],
  bfloat16: [4, (x) => bfloat16BitsToFloat(floatToBfloat16Bits(x))],
};

/**
 * The shortest decimal that rounds back to `x` in `dtype`; `x` itself for float64, integer dtypes and
 * whole numbers (65504 stays 65504 rather than the equally exact but misleading 65500).
 */
export function compactNumber(x: number, dtype: DType): number {
  const rt = ROUND_TRIP[dtype];
  if (rt === undefined || Number.isInteger(x) || !Number.isFinite(x)) return x;
  const [digits, round] = rt;
  // Binary search on the number of digits (3-4 toPrecision calls for a float32, not up to 9): if p
  // digits round-trip, p + 1 do too, since the p-digit decimal is a (p + 1)-digit one and the
  // nearest (p + 1)-digit decimal is at least as close to x.
  let shortest = x;
  let low = 1;
  let high = digits;
  while (low <= high) {
    const p = (low + high) >> 1;
    const y = Number(x.toPrecision(p));
    if (round(y) === x) {
      shortest = y;
      high = p - 1;
    } else low = p + 1;
  }
  return shortest;
}

/** `x` rounded to `digits` significant digits. */
export function roundSignificant(x: number, digits: number): number {
  return Number.isFinite(x) ? Number(x.toPrecision(digits)) : x;
}

/** Three significant digits, for one-line text. */
export function formatShort(x: number): string {
  return String(roundSignificant(x, 3));
}
