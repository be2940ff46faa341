import type { InferenceResult } from '../gateway.js';
import { roundSignificant } from '../tensor/number-format.js';
import { numberReader, type Tensor } from '../tensor/tensor.js';
import type { WorkflowOutputValue } from '../workflows/executor.js';

/** One item's answer in a job's results: what the model's tool would answer for it alone. */

/** Output rows longer than this are left out of a result line (an answer, not a dump). */
const MAX_ROW_VALUES = 4096;

/** A workflow run's answer: each output's row (tensors) or value (literals). */
export function workflowAnswer(outputs: WorkflowOutputValue[]): Record<string, unknown> {
  return {
    outputs: Object.fromEntries(outputs.map((o) => [o.name, 'tensor' in o ? rowOf(o.tensor, 0) : o.value])),
  };
}

/** Item `k`'s answer: its labels, objects, text, the handler's answer, or its output rows. */
export function answerOf(result: InferenceResult, k: number): Record<string, unknown> {
  if (result.predictions) return { predictions: result.predictions[k] };
  if (result.detections) return { detections: result.detections[k] };
  if (result.texts) return { text: result.texts[k] };
  if (result.answers) return { answer: result.answers[k] };
  const tensors = result.tensors ?? [];
  if (result.embedding) {
    const vectors = tensors.find((t) => t.name === result.embedding?.output);
    return { embedding: vectors ? rowOf(vectors.tensor, k) : undefined };
  }
  const outputs: Record<string, unknown> = {};
  for (const { name, tensor } of tensors) outputs[name] = rowOf(tensor, k);
  return { outputs };
}

/** Row `k` of a [items, ...] tensor as numbers (6 significant digits); null when too long to list. */
export function rowOf(tensor: Tensor, k: number): number[] | null {
  const width = tensor.shape.slice(1).reduce((a, b) => a * b, 1);
  if (width > MAX_ROW_VALUES) return null;
  const read = numberReader(tensor);
  return Array.from({ length: width }, (_, i) => roundSignificant(read(k * width + i), 6));
}
