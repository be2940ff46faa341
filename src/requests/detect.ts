import type { ImageGeometry } from '../engines/engine.js';
import type { DetectionOutputConfig } from '../registry/processing.js';
import { roundSignificant } from '../tensor/number-format.js';
import { numberReader, type Tensor } from '../tensor/tensor.js';

/** One object found in an image. */
export interface Detection {
  label: string;
  /** The class's index among the model's classes. */
  index: number;
  score: number;
  /** [x1, y1, x2, y2]: left, top, right and bottom edges in the pixels of the image as sent. */
  box: [number, number, number, number];
}

/** A detection answer per image, with the image's own size (upright, as a viewer shows it). */
export interface DetectionAnswer {
  width: number;
  height: number;
  objects: Detection[];
}

/** The model's detection outputs of one request. */
export interface DetectionOutputs {
  boxes: Tensor;
  scores: Tensor;
  /** [items, boxes] class ids, for models with one score per box. */
  classes?: Tensor | undefined;
}

interface Candidate {
  index: number;
  score: number;
  /** x1 y1 x2 y2 in the model input's pixels. */
  box: [number, number, number, number];
}

/**
 * A detection output's answer per item: each box's best class and score (after the activation,
 * the background class left out), the boxes under the threshold dropped, overlapping boxes
 * suppressed greedily (NMS, per class unless class-agnostic), at most `max_detections` kept,
 * best first, and each box mapped back through the crop and resize to the image as sent.
 */
export function detect(
  outputs: DetectionOutputs,
  geometry: readonly ImageGeometry[],
  labels: readonly string[] | undefined,
  config: DetectionOutputConfig,
  options: { threshold?: number | undefined } = {},
): DetectionAnswer[] {
  const threshold = options.threshold ?? config.threshold;
  const items = outputs.boxes.shape[0] ?? 0;
  const count = outputs.boxes.shape[1] ?? 0;
  const readBoxes = numberReader(outputs.boxes);
  const scoresOf = candidateScores(outputs, config);
  const answers: DetectionAnswer[] = [];
  for (let item = 0; item < items; item++) {
    const where = geometry[item];
    const candidates: Candidate[] = [];
    for (let j = 0; j < count; j++) {
      const { index, score } = scoresOf(item, j);
      if (!(score >= threshold)) continue; // NaN scores too
      const at = (item * count + j) * 4;
      const box = toCorners([readBoxes(at), readBoxes(at + 1), readBoxes(at + 2), readBoxes(at + 3)], config, where);
      if (box.every(Number.isFinite)) candidates.push({ index, score, box });
    }
    const kept = suppress(candidates, config);
    answers.push({
      width: where?.width ?? 0,
      height: where?.height ?? 0,
      objects: kept.map((c) => ({
        label: labels?.[c.index] ?? String(c.index),
        index: c.index,
        score: roundSignificant(c.score, 4),
        box: where ? toImage(c.box, where) : (c.box.map(round2) as Detection['box']),
      })),
    });
  }
  return answers;
}

/** Reads box `j` of `item`'s best class and its score. */
function candidateScores(
  { scores, classes }: DetectionOutputs,
  config: DetectionOutputConfig,
): (item: number, j: number) => { index: number; score: number } {
  const read = numberReader(scores);
  const count = scores.shape[1] ?? 0;
  if (scores.shape.length === 2) {
    const readClass = classes ? numberReader(classes) : () => 0;
    return (item, j) => {
      const raw = read(item * count + j);
      return {
        index: readClass(item * count + j),
        score: config.activation === 'sigmoid' ? sigmoid(raw) : raw,
      };
    };
  }
  const width = scores.shape[2] ?? 0;
  const row = new Float64Array(width);
  return (item, j) => {
    const base = (item * count + j) * width;
    let max = Number.NEGATIVE_INFINITY;
    for (let c = 0; c < width; c++) {
      row[c] = read(base + c);
      if ((row[c] as number) > max) max = row[c] as number;
    }
    // Softmax's denominator; the best class's probability is its own exponential over it.
    let sum = 1;
    if (config.activation === 'softmax') {
      sum = 0;
      for (let c = 0; c < width; c++) sum += Math.exp((row[c] as number) - max);
    }
    let best = -1;
    let bestScore = Number.NEGATIVE_INFINITY;
    for (let c = 0; c < width; c++) {
      if (c === config.background) continue;
      const raw = row[c] as number;
      if (raw > bestScore) {
        best = c;
        bestScore = raw;
      }
    }
    if (best === -1) return { index: 0, score: Number.NaN };
    const score =
      config.activation === 'softmax'
        ? Math.exp(bestScore - max) / sum
        : config.activation === 'sigmoid'
          ? sigmoid(bestScore)
          : bestScore;
    return { index: best, score };
  };
}

function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
}

/** A box in the model's format to x1 y1 x2 y2 in the model input's pixels. */
function toCorners(
  [a, b, c, d]: [number, number, number, number],
  config: DetectionOutputConfig,
  where: ImageGeometry | undefined,
): [number, number, number, number] {
  let box: [number, number, number, number];
  if (config.box_format === 'xywh') box = [a, b, a + c, b + d];
  else if (config.box_format === 'cxcywh') box = [a - c / 2, b - d / 2, a + c / 2, b + d / 2];
  else box = [a, b, c, d];
  if (config.normalized && where) {
    box[0] *= where.input_width;
    box[2] *= where.input_width;
    box[1] *= where.input_height;
    box[3] *= where.input_height;
  }
  return box;
}

/** Model-input pixels to the image's, clipped to it: through the crop, then the resize. */
function toImage(box: [number, number, number, number], g: ImageGeometry): Detection['box'] {
  const x = (v: number) => round2(Math.min(Math.max((v + g.left) * g.scale_x, 0), g.width));
  const y = (v: number) => round2(Math.min(Math.max((v + g.top) * g.scale_y, 0), g.height));
  return [x(box[0]), y(box[1]), x(box[2]), y(box[3])];
}

function round2(v: number): number {
  return Math.round(v * 100) / 100;
}

/**
 * Greedy non-maximum suppression: best first, dropping boxes that overlap a kept one too much,
 * until `max_detections` are kept (so a low threshold over thousands of anchors stays bounded).
 */
function suppress(
  candidates: Candidate[],
  { iou_threshold, class_agnostic, max_detections }: DetectionOutputConfig,
): Candidate[] {
  candidates.sort((p, q) => q.score - p.score);
  if (iou_threshold >= 1) return candidates.slice(0, max_detections);
  const kept: Candidate[] = [];
  for (const c of candidates) {
    if (kept.length === max_detections) break;
    if (!kept.some((k) => (class_agnostic || k.index === c.index) && iou(k.box, c.box) > iou_threshold)) kept.push(c);
  }
  return kept;
}

function iou(p: Candidate['box'], q: Candidate['box']): number {
  const w = Math.min(p[2], q[2]) - Math.max(p[0], q[0]);
  const h = Math.min(p[3], q[3]) - Math.max(p[1], q[1]);
  if (w <= 0 || h <= 0) return 0;
  const inter = w * h;
  const union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter;
  return union > 0 ? inter / union : 0;
}

/** "cat 0.93 at [12, 30, 200, 180]": one image's objects in a line. */
export function describeDetections(answer: DetectionAnswer): string {
  return answer.objects.length === 0
    ? `no object scored above the threshold (${answer.width}x${answer.height} image)`
    : answer.objects.map((o) => `${o.label} ${o.score} at [${o.box.join(', ')}]`).join('; ');
}
