import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TensorgateError } from '../../../src/errors.js';
import { makeTensor } from '../../../src/tensor/tensor.js';
import {
  evaluate,
  evaluateCondition,
  parseExpression,
  referencesOf,
  tensorValue,
  type Value,
} from '../../../src/workflows/expression.js';

const f32 = (shape: number[], values: number[]) =>
  tensorValue(makeTensor('float32', shape, new Uint8Array(Float32Array.from(values).buffer)));

const tensors: Record<string, Value> = {
  'detect.scores': f32([1, 3], [0.1, 0.7, 0.2]),
  'detect.boxes': f32([2, 4], [0, 0, 1, 1, 2, 2, 3, 3]),
  'empty.boxes': f32([0, 4], []),
  'label.id': tensorValue(makeTensor('int64', [1], new Uint8Array(BigInt64Array.of(3n).buffer))),
  x: f32([1, 2], [-1, 4]),
};
const lookup = (stage: string | undefined, tensor: string): Value => {
  const v = tensors[stage === undefined ? tensor : `${stage}.${tensor}`];
  if (v === undefined) throw new Error(`no ${stage}.${tensor}`);
  return v;
};
const cond = (source: string) => evaluateCondition(source, parseExpression(source), lookup);
const value = (source: string) => evaluate(source, parseExpression(source), lookup);

describe('workflow conditions', () => {
  it('evaluates the documented examples', () => {
    assert.equal(cond('max(detect.scores) > 0.5'), true);
    assert.equal(cond('argmax(detect.scores) == 1'), true);
    assert.equal(cond('argmax(label.id) == 0 and label.id == 3'), true);
    assert.equal(cond('len(detect.boxes) > 0'), true);
    assert.equal(cond('len(empty.boxes) > 0'), false);
    assert.equal(cond('not all(detect.scores < 0.5)'), true);
    assert.equal(cond('any(x < 0) && !(sum(x) == 0)'), true);
  });

  it('follows precedence: unary minus, * /, + -, comparisons, not, and, or', () => {
    assert.equal(value('1 + 2 * 3'), 7);
    assert.equal(value('(1 + 2) * 3'), 9);
    assert.equal(value('-2 * -3'), 6);
    assert.equal(cond('1 > 2 or 2 > 1 and not 0'), true);
    assert.equal(value('10 / 4 - 1e-1'), 2.4);
    assert.equal(value('true + false'), 1);
  });

  it('works element-wise on tensors and reduces them with functions', () => {
    const doubled = value('x * 2 + abs(x)') as { shape: number[]; data: Float64Array };
    assert.deepEqual(doubled.shape, [1, 2]);
    assert.deepEqual([...doubled.data], [-1, 12]);
    assert.equal(value('numel(detect.boxes)'), 8);
    assert.equal(value('mean(x)'), 1.5);
    assert.equal(value('min(detect.scores)'), Math.fround(0.1));
    assert.equal(value('argmin(x)'), 0);
    assert.ok(Number.isNaN(value('max(empty.boxes)') as number));
  });

  it('lists the tensors a condition reads', () => {
    assert.deepEqual(referencesOf(parseExpression('max(detect.scores) > 0.5 and len(x) > 0')), [
      { stage: 'detect', tensor: 'scores' },
      { stage: undefined, tensor: 'x' },
    ]);
  });

  it('refuses what does not parse, naming the character', () => {
    const refused = (source: string, message: RegExp) =>
      assert.throws(
        () => parseExpression(source),
        (err: TensorgateError) => err.code === 'INVALID_WORKFLOW' && message.test(err.message),
      );
    refused('max(detect.scores > 0.5', /expected "\)" but found the end/);
    refused('max(a, b) > 1', /max\(\) takes one argument at character 6/);
    refused('exec(x)', /unknown function "exec"/);
    refused('x > ', /unexpected end/);
    refused('x = 1', /unexpected "=" at character 3/);
    refused('x > 1 y', /unexpected "y"/);
    refused('detect. > 1', /expected a tensor name after "detect\."/);
    refused('__proto__.constructor("x")', /unexpected """ at character 23/);
    refused('1 < 2 == 1', /unexpected "==" at character 7/); // comparisons do not chain
    refused(`${'('.repeat(100)}1${')'.repeat(100)}`, /nested more than 64 deep/);
    refused('-'.repeat(200).concat('1'), /nested more than 64 deep/);
    refused('x'.repeat(3000), /longer than 2000 characters/);
  });

  it('fails a condition that is not one truth, saying how to reduce it', () => {
    assert.throws(
      () => cond('detect.scores > 0.5'),
      (err: TensorgateError) =>
        err.code === 'WORKFLOW_CONDITION_FAILED' &&
        /shape \[1,3\] is not true or false; reduce it with any\(\)/.test(err.message),
    );
    assert.throws(
      () => cond('any(detect.scores + detect.boxes)'),
      (err: TensorgateError) =>
        err.code === 'WORKFLOW_CONDITION_FAILED' && /shapes \[1,3\] and \[2,4\]/.test(err.message),
    );
    assert.equal(cond('label.id'), true, 'a one-element tensor is a truth');
  });
});
