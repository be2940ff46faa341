import { dtypeSize } from './dtype.js';
import { numberReader, type Tensor } from './tensor.js';

/**
 * How far one tensor is from another, element by element. The rule every accuracy check of
 * tensorgate applies (ONNX exports, precision variants): an element is within when
 * |actual - expected| <= tolerance * (1 + |expected|), an absolute tolerance near zero and a
 * relative one for large values.
 */

export interface OutputError {
  name: string;
  maxAbs: number;
  maxRel: number;
  within: boolean;
}

export function outputError(name: string, actual: Tensor, expected: Tensor, tolerance: number): OutputError {
  const elements = expected.data.byteLength / dtypeSize(expected.dtype);
  if (actual.data.byteLength !== expected.data.byteLength || actual.shape.join() !== expected.shape.join())
    return { name, maxAbs: Number.POSITIVE_INFINITY, maxRel: Number.POSITIVE_INFINITY, within: false };
  const a = numberReader(actual);
  const e = numberReader(expected);
  let maxAbs = 0;
  let maxRel = 0;
  let within = true;
  for (let i = 0; i < elements; i++) {
    const diff = Math.abs(a(i) - e(i));
    const scale = Math.abs(e(i));
    maxAbs = Math.max(maxAbs, diff);
    maxRel = Math.max(maxRel, scale > 0 ? diff / scale : diff);
    if (!(diff <= tolerance * (1 + scale))) within = false;
  }
  return { name, maxAbs, maxRel, within };
}
