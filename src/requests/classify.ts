import type { ClassificationOutputConfig } from '../registry/processing.js';
import { roundSignificant } from '../tensor/number-format.js';
import { numberReader, type Tensor } from '../tensor/tensor.js';
import { topIndices } from '../tensor/topk.js';

/** One label of a classification answer. */
export interface Prediction {
  label: string;
  /** The class's probability (softmax), independent probability (sigmoid) or raw score (none). */
  score: number;
  index: number;
}

/**
 * A classification output's answer per item: the activation applied to each row of `[items,
 * classes]` scores, then the top k labels, leaving out those under the threshold.
 */
export function classify(
  scores: Tensor,
  labels: readonly string[] | undefined,
  config: ClassificationOutputConfig,
  options: { topK?: number | undefined; threshold?: number | undefined } = {},
): Prediction[][] {
  const classes = scores.shape.at(-1) ?? 0;
  const items = classes === 0 ? 0 : (scores.shape[0] ?? 0);
  const k = Math.min(options.topK ?? config.top_k, classes);
  const threshold = options.threshold ?? config.threshold;
  const read = numberReader(scores);
  const answers: Prediction[][] = [];
  for (let item = 0; item < items; item++) {
    const row = new Float64Array(classes);
    for (let c = 0; c < classes; c++) row[c] = read(item * classes + c);
    activate(row, config.activation);
    answers.push(
      topIndices(row, k)
        .filter((index) => threshold === undefined || (row[index] as number) >= threshold)
        .map((index) => ({
          label: labels?.[index] ?? String(index),
          score: roundSignificant(row[index] as number, 4),
          index,
        })),
    );
  }
  return answers;
}

function activate(row: Float64Array, activation: ClassificationOutputConfig['activation']): void {
  if (activation === 'sigmoid') {
    for (let i = 0; i < row.length; i++) row[i] = 1 / (1 + Math.exp(-(row[i] as number)));
  } else if (activation === 'softmax') {
    let max = Number.NEGATIVE_INFINITY;
    for (const x of row) if (x > max) max = x;
    let sum = 0;
    for (let i = 0; i < row.length; i++) {
      const e = Math.exp((row[i] as number) - max);
      row[i] = e;
      sum += e;
    }
    for (let i = 0; i < row.length; i++) row[i] = (row[i] as number) / sum;
  }
}

/** "7 (0.98), 1 (0.01)": one item's answer in a line. */
export function describePredictions(predictions: Prediction[]): string {
  return predictions.length === 0
    ? 'no label scored above the threshold'
    : predictions.map((p) => `${p.label} (${p.score})`).join(', ');
}
