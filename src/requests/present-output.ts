import type { TensorStore } from '../tensor/store.js';
import { describeSummary, summarizeTensor, type TensorSummary } from '../tensor/summary.js';
import type { Tensor } from '../tensor/tensor.js';

export interface OutputResult {
  name: string;
  dtype: string;
  shape: number[];
  uri: string;
  summary: TensorSummary;
  text: string;
}

/**
 * An output tensor as a caller sees it: kept in the tensor store behind a tensor:// handle (to read
 * as .npy or pass to a later call), with a summary and a one-line description instead of the values.
 */
export function presentOutput(
  store: TensorStore,
  name: string,
  tensor: Tensor,
  source: string,
  options: { labels?: string[] | undefined; topK: number },
): OutputResult {
  const summary = summarizeTensor(tensor, { labels: options.labels, topK: options.topK });
  const stored = store.put(tensor, source);
  return {
    name,
    dtype: tensor.dtype,
    shape: tensor.shape,
    uri: stored.uri,
    summary,
    text: describeSummary(name, summary),
  };
}
