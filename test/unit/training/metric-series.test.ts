import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MetricSeries } from '../../../src/training/metric-series.js';
import { checkValue, type HyperparameterSpec } from '../../../src/training/run-declaration.js';

describe('MetricSeries', () => {
  it('summarises every point seen: last, min, max, recent mean, trend, non-finite count', () => {
    const s = new MetricSeries();
    for (let step = 0; step < 200; step++) s.push(step, 10 - step * 0.05 + (step % 2 ? 0.01 : -0.01), step);
    s.push(200, Number.NaN, 200);
    const m = s.summary();
    assert.equal(m.count, 201);
    assert.equal(m.non_finite, 1);
    assert.equal(m.last.step, 200);
    assert.ok(Number.isNaN(m.last.value));
    assert.deepEqual(m.max, { step: 0, value: 9.99 });
    assert.equal(m.min?.step, 199);
    assert.equal(m.trend, 'falling');
    assert.ok(m.recent_mean !== null && Math.abs(m.recent_mean - (10 - 149.5 * 0.05)) < 0.05);
  });

  it('calls noise flat and says unknown with too few points', () => {
    const flat = new MetricSeries();
    for (let step = 0; step < 100; step++) flat.push(step, step % 2, step);
    assert.equal(flat.summary().trend, 'flat');
    const few = new MetricSeries();
    few.push(0, 1, 0);
    assert.equal(few.summary().trend, 'unknown');
  });

  it('halves its points past the bound, keeping the exact statistics', () => {
    const s = new MetricSeries(100);
    for (let step = 0; step < 1000; step++) s.push(step, step, step);
    assert.ok(s.length <= 100);
    const m = s.summary();
    assert.equal(m.count, 1000);
    assert.deepEqual(m.min, { step: 0, value: 0 });
    assert.deepEqual(m.max, { step: 999, value: 999 });
    const { steps } = s.points();
    assert.equal(steps.at(-1), 999);
  });

  it('downsamples to bucket means and starts at since_step', () => {
    const s = new MetricSeries();
    for (let step = 0; step < 100; step++) s.push(step, step, step);
    const points = s.downsample(10);
    assert.equal(points.length, 10);
    assert.deepEqual(points[0], { step: 9, value: 4.5 });
    assert.deepEqual(points.at(-1), { step: 99, value: 94.5 });
    assert.deepEqual(s.downsample(5, 98), [
      { step: 98, value: 98 },
      { step: 99, value: 99 },
    ]);
    assert.deepEqual(s.downsample(0), []);
  });
});

describe('checkValue', () => {
  const lr: HyperparameterSpec = { name: 'lr', type: 'float', initial: 0.1, min: 0, max: 1 };
  const n: HyperparameterSpec = { name: 'n', type: 'int', initial: 2 };
  const flag: HyperparameterSpec = { name: 'flag', type: 'bool', initial: false };

  it('accepts values of the declared type inside the range', () => {
    assert.equal(checkValue('r', lr, 0.5), 0.5);
    assert.equal(checkValue('r', lr, 1), 1);
    assert.equal(checkValue('r', n, -7), -7);
    assert.equal(checkValue('r', flag, true), 1);
  });

  for (const [spec, value, why] of [
    [lr, Number.NaN, /finite number, got NaN/],
    [lr, Number.POSITIVE_INFINITY, /finite number, got Infinity/],
    [lr, 1.5, /range 0..1, got 1.5/],
    [lr, '0.5', /takes a number \(float\), got the string "0.5"/],
    [n, 2.5, /integer/],
    [flag, 0, /true or false, got number/],
    [lr, null, /got null/],
  ] as const) {
    it(`rejects ${String(value)} for ${spec.name} with INVALID_HYPERPARAMETER`, () => {
      assert.throws(
        () => checkValue('run-1', spec, value),
        (err: { code: string; message: string }) =>
          err.code === 'INVALID_HYPERPARAMETER' &&
          err.message.startsWith(`run run-1: ${spec.name} `) &&
          why.test(err.message),
      );
    });
  }
});
