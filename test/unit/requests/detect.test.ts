import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ImageGeometry } from '../../../src/engines/engine.js';
import { DetectionOutputSchema } from '../../../src/registry/processing.js';
import { describeDetections, detect } from '../../../src/requests/detect.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

/** Boxes, scores and classes to detection answers: activation, threshold, NMS, mapping back. */

function f32(shape: number[], values: number[]): Tensor {
  return { dtype: 'float32', shape, data: new Uint8Array(new Float32Array(values).buffer) };
}

function i64(shape: number[], values: number[]): Tensor {
  return { dtype: 'int64', shape, data: new Uint8Array(new BigInt64Array(values.map(BigInt)).buffer) };
}

/** A 400x300 photo resized to 80x60 (shorter side 60), then cropped to 60x60 from the middle. */
const photo: ImageGeometry = {
  width: 400,
  height: 300,
  input_width: 60,
  input_height: 60,
  left: 10,
  top: 0,
  scale_x: 5,
  scale_y: 5,
};

const config = (raw: Record<string, unknown> = {}) => DetectionOutputSchema.parse({ type: 'detection', ...raw });

test('maps boxes back through the crop and resize, and clips them to the image', () => {
  const boxes = f32([1, 2, 4], [0, 0, 10, 12, 50, 20, 70, 40]);
  const scores = f32([1, 2], [0.9, 0.8]);
  const [answer] = detect({ boxes, scores, classes: i64([1, 2], [1, 0]) }, [photo], ['cat', 'dog'], config());
  assert.deepEqual(answer, {
    width: 400,
    height: 300,
    objects: [
      { label: 'dog', index: 1, score: 0.9, box: [50, 0, 100, 60] },
      // x2 = (70 + 10) * 5 = 400 exactly; y edges 100 and 200.
      { label: 'cat', index: 0, score: 0.8, box: [300, 100, 400, 200] },
    ],
  });
  // Past the right edge: clipped to the image's width.
  const [clipped] = detect(
    { boxes: f32([1, 1, 4], [55, 0, 75, 10]), scores: f32([1, 1], [1]), classes: i64([1, 1], [0]) },
    [photo],
    undefined,
    config(),
  );
  assert.deepEqual(clipped?.objects[0]?.box, [325, 0, 400, 50]);
  assert.equal(clipped?.objects[0]?.label, '0');
});

test('reads xywh and normalised cxcywh boxes', () => {
  const one = (values: number[], raw: Record<string, unknown>) =>
    detect(
      { boxes: f32([1, 1, 4], values), scores: f32([1, 1], [1]), classes: i64([1, 1], [0]) },
      [photo],
      undefined,
      config(raw),
    )[0]?.objects[0]?.box;
  assert.deepEqual(one([0, 0, 10, 12], { box_format: 'xywh' }), [50, 0, 100, 60]);
  assert.deepEqual(one([0.5, 0.5, 0.2, 0.1], { box_format: 'cxcywh', normalized: true }), [170, 135, 230, 165]);
});

test('suppresses overlapping boxes of a class, keeps those of other classes unless class-agnostic', () => {
  const boxes = f32([1, 4, 4], [0, 0, 10, 10, 1, 1, 11, 11, 0, 0, 10, 10, 30, 30, 40, 40]);
  const scores = f32([1, 4], [0.9, 0.95, 0.7, 0.6]);
  const classes = i64([1, 4], [0, 0, 1, 0]);
  const found = (raw: Record<string, unknown>) =>
    detect({ boxes, scores, classes }, [photo], ['a', 'b'], config(raw))[0]?.objects.map((o) => `${o.label}${o.score}`);
  assert.deepEqual(found({}), ['a0.95', 'b0.7', 'a0.6']);
  assert.deepEqual(found({ class_agnostic: true }), ['a0.95', 'a0.6']);
  assert.deepEqual(found({ iou_threshold: 1 }), ['a0.95', 'a0.9', 'b0.7', 'a0.6']);
  assert.deepEqual(found({ max_detections: 2 }), ['a0.95', 'b0.7']);
  assert.deepEqual(found({ threshold: 0.8 }), ['a0.95']);
  assert.deepEqual(
    detect({ boxes, scores, classes }, [photo], ['a', 'b'], config(), { threshold: 0.65 })[0]?.objects.length,
    2,
  );
});

test('per-class scores: softmax with a background class, sigmoid, per item of a batch', () => {
  const boxes = f32([2, 1, 4], [0, 0, 10, 10, 0, 0, 20, 20]);
  // Item 0: "cat" wins. Item 1: the background class wins, but it is never answered: the best
  // other class's probability (0.12) is under the threshold.
  const logits = f32([2, 1, 3], [2, 0, 0, 0, 0, 2]);
  const labels = ['cat', 'dog', 'none'];
  const answers = detect(
    { boxes, scores: logits },
    [photo, { ...photo, width: 60, height: 60, left: 0, scale_x: 1, scale_y: 1 }],
    labels,
    config({ activation: 'softmax', background: 2 }),
  );
  assert.equal(answers[0]?.objects[0]?.label, 'cat');
  assert.equal(answers[0]?.objects[0]?.score, 0.787);
  assert.deepEqual(answers[1], { width: 60, height: 60, objects: [] });
  assert.equal(describeDetections(answers[1] as never), 'no object scored above the threshold (60x60 image)');
  assert.equal(describeDetections(answers[0] as never), 'cat 0.787 at [50, 0, 100, 50]');
  const sigmoid = detect({ boxes, scores: logits }, [photo, photo], labels, config({ activation: 'sigmoid' }));
  assert.deepEqual(
    sigmoid.map((a) => a.objects.map((o) => `${o.label} ${o.score}`)),
    [['cat 0.8808'], ['none 0.8808']],
  );
});

test('drops boxes with NaN scores or coordinates', () => {
  const boxes = f32([1, 2, 4], [0, 0, Number.NaN, 10, 0, 0, 10, 10]);
  const scores = f32([1, 2], [0.9, Number.NaN]);
  const [answer] = detect({ boxes, scores, classes: i64([1, 2], [0, 0]) }, [photo], undefined, config());
  assert.deepEqual(answer?.objects, []);
});
