/**
 * IEEE half precision (float16) and bfloat16 conversions. Encoding rounds a JS number (a double)
 * straight to the nearest representable value, ties to even, as numpy's float64 -> float16 cast
 * does; values past the largest finite value become infinity. Decoding uses 64K-entry tables built
 * on first use, so converting a large tensor is one lookup per element.
 */

function roundHalfEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  if (d > 0.5 || (d === 0.5 && f % 2 === 1)) return f + 1;
  return f;
}

/** Rounds `x` to a binary float with `expBits` exponent bits and `mantBits` mantissa bits; returns its bits. */
function encodeSmallFloat(x: number, expBits: number, mantBits: number): number {
  const bias = (1 << (expBits - 1)) - 1;
  const expMax = (1 << expBits) - 1;
  const inf = expMax << mantBits;
  if (Number.isNaN(x)) return inf | (1 << (mantBits - 1));
  const sign = x < 0 || Object.is(x, -0) ? 1 << (expBits + mantBits) : 0;
  const a = Math.abs(x);
  if (a === Number.POSITIVE_INFINITY) return sign | inf;
  const minExp = 1 - bias;
  if (a < 2 ** minExp) {
    // Subnormal: a whole number of the smallest step; a carry into 1 << mantBits is the smallest normal.
    return sign | roundHalfEven(a * 2 ** (mantBits - minExp));
  }
  let e = Math.floor(Math.log2(a));
  let p = 2 ** e;
  if (p > a) {
    e -= 1;
    p /= 2;
  } else if (p * 2 <= a) {
    e += 1;
    p *= 2;
  }
  // a / p is in [1, 2) and every step here is exact in double precision.
  let m = roundHalfEven((a / p - 1) * 2 ** mantBits);
  if (m === 1 << mantBits) {
    m = 0;
    e += 1;
  }
  const biased = e + bias;
  if (biased >= expMax) return sign | inf;
  return sign | (biased << mantBits) | m;
}

/** float16 bits (0..0xFFFF) for a number, round to nearest even. */
export function floatToHalfBits(x: number): number {
  return encodeSmallFloat(x, 5, 10);
}

/** bfloat16 bits (0..0xFFFF) for a number, round to nearest even. */
export function floatToBfloat16Bits(x: number): number {
  return encodeSmallFloat(x, 8, 7);
}

/** The value of float16 bits. */
export function halfBitsToFloat(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

const scratch = new DataView(new ArrayBuffer(4));

/** The value of bfloat16 bits (the upper half of a float32). */
export function bfloat16BitsToFloat(bits: number): number {
  scratch.setUint32(0, (bits & 0xffff) << 16);
  return scratch.getFloat32(0);
}

let halfTable: Float64Array | undefined;
let bfloat16Table: Float64Array | undefined;

/** 65,536 values indexed by float16 bits. */
export function float16Values(): Float64Array {
  if (halfTable === undefined) {
    halfTable = new Float64Array(65536);
    for (let i = 0; i < 65536; i++) halfTable[i] = halfBitsToFloat(i);
  }
  return halfTable;
}

/** 65,536 values indexed by bfloat16 bits. */
export function bfloat16Values(): Float64Array {
  if (bfloat16Table === undefined) {
    const words = new Uint32Array(65536);
    for (let i = 0; i < 65536; i++) words[i] = i << 16;
    bfloat16Table = Float64Array.from(new Float32Array(words.buffer));
  }
  return bfloat16Table;
}
