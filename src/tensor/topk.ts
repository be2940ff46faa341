/**
 * Top-k classes per row of a `[..., classes]` tensor. Whether the values are logits decides whether
 * a softmax probability is added: rows whose values all lie in [0, 1] and sum to ~1 are already
 * probabilities; values all in [0, 1] that do not sum to 1 are independent scores (e.g. sigmoid
 * outputs) that a softmax would distort; anything else is treated as logits.
 */
import { compactNumber, roundSignificant } from './number-format.js';
import { numberReader, numel, type Tensor } from './tensor.js';

export type ScoreKind = 'logits' | 'probabilities' | 'scores';

export interface TopItem {
  label: string;
  index: number;
  /** The raw value of the element. */
  score: number;
  /** softmax over the row, present when the values are logits. */
  probability?: number;
}

export interface TopRow {
  row: number;
  top: TopItem[];
}

export interface TopKResult {
  kind: ScoreKind;
  rows: TopRow[];
  /** All rows in the tensor (product of every dimension but the last). */
  totalRows: number;
}

function classify(rows: Float64Array[]): ScoreKind {
  let sumsToOne = true;
  for (const row of rows) {
    let sum = 0;
    for (const x of row) {
      if (Number.isNaN(x)) continue;
      if (x < 0 || x > 1) return 'logits';
      sum += x;
    }
    if (Math.abs(sum - 1) > 1e-3) sumsToOne = false;
  }
  return sumsToOne ? 'probabilities' : 'scores';
}

function softmax(row: Float64Array): Float64Array {
  let max = Number.NEGATIVE_INFINITY;
  for (const x of row) if (x > max) max = x;
  const out = new Float64Array(row.length);
  let sum = 0;
  for (let i = 0; i < row.length; i++) {
    const e = Number.isNaN(row[i] as number) ? 0 : Math.exp((row[i] as number) - max);
    out[i] = e;
    sum += e;
  }
  for (let i = 0; i < out.length; i++) out[i] = (out[i] as number) / sum;
  return out;
}

/** Indices of the k largest non-NaN values, largest first; ties keep the lower index first. */
export function topIndices(row: Float64Array, k: number): number[] {
  const best: number[] = [];
  for (let i = 0; i < row.length; i++) {
    const x = row[i] as number;
    if (Number.isNaN(x)) continue;
    if (best.length === k && x <= (row[best[k - 1] as number] as number)) continue;
    let at = best.length;
    while (at > 0 && x > (row[best[at - 1] as number] as number)) at--;
    best.splice(at, 0, i);
    if (best.length > k) best.pop();
  }
  return best;
}

export function topKRows(t: Tensor, labels: readonly string[], k: number, maxRows: number): TopKResult {
  const classes = t.shape.at(-1) ?? 1;
  const totalRows = classes === 0 ? 0 : numel(t.shape) / classes;
  const read = numberReader(t);
  const values: Float64Array[] = [];
  for (let r = 0; r < Math.min(totalRows, maxRows); r++) {
    const row = new Float64Array(classes);
    for (let c = 0; c < classes; c++) row[c] = read(r * classes + c);
    values.push(row);
  }
  const kind = classify(values);
  const rows = values.map((row, r) => {
    const probs = kind === 'logits' ? softmax(row) : undefined;
    const top = topIndices(row, k).map((index) => {
      const item: TopItem = {
        label: labels[index] ?? String(index),
        index,
        score: compactNumber(row[index] as number, t.dtype),
      };
      const p = probs?.[index];
      if (p !== undefined && Number.isFinite(p)) item.probability = roundSignificant(p, 4);
      return item;
    });
    return { row: r, top };
  });
  return { kind, rows, totalRows };
}
