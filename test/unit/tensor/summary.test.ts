import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fromNestedArray } from '../../../src/tensor/nested.js';
import { describeSummary, summarizeTensor, TensorSummarySchema } from '../../../src/tensor/summary.js';
import { makeTensor } from '../../../src/tensor/tensor.js';

const LABELS = ['cat', 'dog', 'bird', 'fish'];

function softmax(xs: number[]): number[] {
  const m = Math.max(...xs);
  const e = xs.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
}

function checked(s: ReturnType<typeof summarizeTensor>) {
  assert.deepEqual(TensorSummarySchema.parse(s), s, 'the summary matches its schema');
  assert.deepEqual(JSON.parse(JSON.stringify(s)), s, 'the summary is plain JSON');
  return s;
}

test('logits with labels: top-k per row with softmax probabilities', () => {
  const logits = [2, 1, 0.5, -1];
  const s = checked(summarizeTensor(fromNestedArray([logits], 'float32'), { labels: LABELS, topK: 2 }));
  const p = softmax(logits);
  assert.equal(s.scores, 'logits');
  assert.equal(s.top?.length, 1);
  const [first, second] = s.top?.[0]?.top ?? [];
  assert.deepEqual([first?.label, first?.index, first?.score], ['cat', 0, 2]);
  assert.deepEqual([second?.label, second?.index, second?.score], ['dog', 1, 1]);
  assert.ok(Math.abs((first?.probability ?? 0) - (p[0] as number)) < 1e-4);
  assert.ok(Math.abs((second?.probability ?? 0) - (p[1] as number)) < 1e-4);
  assert.equal(s.stats, undefined);
  assert.deepEqual(s.values, [logits]);
  assert.equal(describeSummary('logits', s), 'logits float32[1,4]: top-1 cat (p=0.61)');
});

test('probabilities are recognised and not softmaxed again', () => {
  const s = checked(summarizeTensor(fromNestedArray([0.1, 0.6, 0.2, 0.1], 'float32'), { labels: LABELS, topK: 3 }));
  assert.equal(s.scores, 'probabilities');
  const top = s.top?.[0]?.top ?? [];
  assert.deepEqual(
    top.map((t) => [t.label, t.score]),
    [
      ['dog', 0.6],
      ['bird', 0.2],
      ['cat', 0.1],
    ],
    'float32 scores print as their shortest exact form; ties keep the lower index',
  );
  assert.ok(top.every((t) => t.probability === undefined));
  assert.equal(describeSummary('probs', s), 'probs float32[4]: top-1 dog (p=0.6)');
});

test('independent scores in [0, 1] (sigmoid) get no softmax', () => {
  const s = checked(summarizeTensor(fromNestedArray([[0.9, 0.8, 0.1, 0.7]], 'float64'), { labels: LABELS }));
  assert.equal(s.scores, 'scores');
  assert.equal(s.top?.[0]?.top.length, 4, 'topK defaults to 5, capped at the class count');
  assert.ok(s.top?.[0]?.top.every((t) => t.probability === undefined));
  assert.equal(describeSummary('tags', s), 'tags float64[1,4]: top-1 cat (score=0.9)');
});

test('many rows are capped and the rest counted', () => {
  const rows = Array.from({ length: 10 }, (_, r) => [0, 0, 0, 0].map((_, c) => (c === r % 4 ? 5 : 0)));
  const s = checked(summarizeTensor(fromNestedArray(rows, 'float32'), { labels: LABELS, topK: 1 }));
  assert.equal(s.top?.length, 8);
  assert.equal(s.rows_omitted, 2);
  assert.deepEqual(
    s.top?.map((r) => r.top[0]?.label),
    ['cat', 'dog', 'bird', 'fish', 'cat', 'dog', 'bird', 'fish'],
  );
  assert.equal(s.values, undefined, '40 elements are more than the default 16');
  assert.match(
    describeSummary('y', s),
    /^y float32\[10,4\]: top-1 cat \(p=0\.9\d*\); dog .*; bird .*; \.\.\. 7 more rows$/,
  );
  assert.equal(
    checked(summarizeTensor(fromNestedArray(rows, 'float32'), { labels: LABELS, maxRows: 3 })).rows_omitted,
    7,
  );
});

test('leading dimensions are flattened into rows', () => {
  const t = fromNestedArray([[[1, 9, 0, 0]], [[0, 0, 0, 9]]], 'float16');
  const s = checked(summarizeTensor(t, { labels: LABELS, topK: 1 }));
  assert.deepEqual(
    s.top?.map((r) => [r.row, r.top[0]?.label]),
    [
      [0, 'dog'],
      [1, 'fish'],
    ],
  );
});

test('without labels: stats in one pass, values when small', () => {
  const t = fromNestedArray(
    [
      [-1.2, 3.4, 0.5, 0.25],
      [1, 2, -0.5, 0],
    ],
    'float32',
  );
  const s = checked(summarizeTensor(t));
  assert.equal(s.top, undefined);
  assert.equal(s.stats?.min, -1.2);
  assert.equal(s.stats?.max, 3.4);
  const xs = [-1.2, 3.4, 0.5, 0.25, 1, 2, -0.5, 0].map(Math.fround);
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const std = Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / xs.length);
  assert.ok(Math.abs((s.stats?.mean ?? 0) - mean) < 1e-5);
  assert.ok(Math.abs((s.stats?.std ?? 0) - std) < 1e-5);
  assert.equal(s.stats?.nan, undefined);
  assert.deepEqual(s.values, [
    [-1.2, 3.4, 0.5, 0.25],
    [1, 2, -0.5, 0],
  ]);
  assert.equal(s.numel, 8);
  const big = checked(summarizeTensor(t, { maxValues: 4 }));
  assert.equal(big.values, undefined);
  assert.equal(describeSummary('y', big), 'y float32[2,4]: min -1.2 max 3.4 mean 0.681 std 1.36');
});

test('stats skip NaN and infinities and count them', () => {
  const t = makeTensor(
    'float64',
    [5],
    new Uint8Array(new Float64Array([1, Number.NaN, 3, Number.POSITIVE_INFINITY, Number.NaN]).buffer),
  );
  const s = checked(summarizeTensor(t));
  assert.deepEqual(s.stats, { min: 1, max: 3, mean: 2, std: 1, nan: 2, inf: 1 });
  assert.deepEqual(s.values, [1, 'NaN', 3, 'Infinity', 'NaN']);
  assert.equal(
    describeSummary('z', summarizeTensor(t, { maxValues: 0 })),
    'z float64[5]: min 1 max 3 mean 2 std 1, 2 NaN, 1 inf',
  );
  const allNan = makeTensor('float32', [2], new Uint8Array(new Float32Array([Number.NaN, Number.NaN]).buffer));
  const n = checked(summarizeTensor(allNan, { maxValues: 0 }));
  assert.deepEqual(n.stats, { min: null, max: null, mean: null, std: null, nan: 2 });
  assert.equal(describeSummary('n', n), 'n float32[2]: no finite values, 2 NaN');
});

test('NaN in logits is skipped by top-k', () => {
  const t = makeTensor('float32', [4], new Uint8Array(new Float32Array([Number.NaN, 2, 1, 0]).buffer));
  const s = checked(summarizeTensor(t, { labels: LABELS, topK: 2 }));
  assert.deepEqual(
    s.top?.[0]?.top.map((x) => x.label),
    ['dog', 'bird'],
  );
});

test('other dtypes: int64, bool, float16, bfloat16, scalars, empty tensors', () => {
  const i = checked(summarizeTensor(fromNestedArray([3, -4, 2 ** 40], 'int64')));
  assert.deepEqual(i.values, [3, -4, 2 ** 40]);
  assert.equal(i.stats?.max, 2 ** 40);
  const b = checked(summarizeTensor(fromNestedArray([true, false, true, true], 'bool')));
  assert.deepEqual(b.values, [true, false, true, true]);
  assert.equal(b.stats?.mean, 0.75);
  const h = checked(summarizeTensor(fromNestedArray([0.1, 65504, 1e-7], 'float16')));
  assert.deepEqual(h.values, [0.1, 65504, 1e-7], 'float16 0.0999755859375 prints as 0.1, its shortest exact form');
  const bf = checked(summarizeTensor(fromNestedArray([1.23456], 'bfloat16')));
  assert.deepEqual(bf.values, [1.234], 'bfloat16 1.234375 prints as 1.234');
  const scalar = checked(summarizeTensor(fromNestedArray(0.25, 'float32')));
  assert.deepEqual([scalar.shape, scalar.numel, scalar.values], [[], 1, 0.25]);
  assert.equal(describeSummary('loss', scalar), 'loss float32[]: 0.25');
  const empty = checked(summarizeTensor(makeTensor('float32', [0, 3], new Uint8Array(0))));
  assert.deepEqual([empty.numel, empty.stats, empty.values], [0, undefined, []]);
  assert.equal(describeSummary('e', empty), 'e float32[0,3]: []');
});

test('labels that do not match the last dimension fall back to stats with a note', () => {
  const s = checked(summarizeTensor(fromNestedArray([1, 2, 3], 'float32'), { labels: LABELS }));
  assert.equal(s.top, undefined);
  assert.ok(s.stats);
  assert.equal(s.note, '4 labels but the last dimension is 3; showing statistics');
});

test('a large tensor summarises without values', () => {
  const n = 150528;
  const f = new Float32Array(n);
  for (let k = 0; k < n; k++) f[k] = (k % 100) - 50;
  const s = checked(summarizeTensor(makeTensor('float32', [1, 3, 224, 224], new Uint8Array(f.buffer))));
  assert.equal(s.values, undefined);
  assert.deepEqual([s.stats?.min, s.stats?.max], [-50, 49]);
  assert.ok(Math.abs((s.stats?.mean ?? 0) - -0.5) < 0.01);
});
