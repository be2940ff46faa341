/**
 * min / max / mean / std of a tensor in one pass (Welford), over its finite elements; NaN and
 * infinite elements are counted apart so one bad value does not hide the rest.
 */
import { compactNumber, roundSignificant } from './number-format.js';
import { numberReader, numel, type Tensor } from './tensor.js';

export interface TensorStats {
  /** null when the tensor has no finite element. */
  min: number | null;
  max: number | null;
  mean: number | null;
  /** Population standard deviation (numpy's default, ddof=0). */
  std: number | null;
  /** Count of NaN elements, present only when there are some. */
  nan?: number;
  /** Count of +/-Infinity elements, present only when there are some. */
  inf?: number;
}

export function tensorStats(t: Tensor): TensorStats {
  const read = numberReader(t);
  const n = numel(t.shape);
  let count = 0;
  let mean = 0;
  let m2 = 0;
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  let nan = 0;
  let inf = 0;
  for (let i = 0; i < n; i++) {
    const x = read(i);
    if (!Number.isFinite(x)) {
      if (Number.isNaN(x)) nan++;
      else inf++;
      continue;
    }
    count++;
    const delta = x - mean;
    mean += delta / count;
    m2 += delta * (x - mean);
    if (x < min) min = x;
    if (x > max) max = x;
  }
  const stats: TensorStats =
    count === 0
      ? { min: null, max: null, mean: null, std: null }
      : {
          min: compactNumber(min, t.dtype),
          max: compactNumber(max, t.dtype),
          mean: roundSignificant(mean, 6),
          std: roundSignificant(Math.sqrt(m2 / count), 6),
        };
  if (nan > 0) stats.nan = nan;
  if (inf > 0) stats.inf = inf;
  return stats;
}
