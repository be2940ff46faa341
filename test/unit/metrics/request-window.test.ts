import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { percentiles, RequestWindow, type StageTimes } from '../../../src/metrics/request-window.js';

function times(total: number, parts: Partial<StageTimes> = {}): StageTimes {
  return {
    decode_ms: 0,
    preprocess_ms: 0,
    queue_ms: 0,
    transfer_ms: 0,
    compute_ms: total,
    postprocess_ms: 0,
    encode_ms: 0,
    total_ms: total,
    ...parts,
  };
}

describe('percentiles', () => {
  it('uses nearest rank', () => {
    const values = Array.from({ length: 100 }, (_, i) => i + 1);
    assert.deepEqual(percentiles(values), { p50: 50, p90: 90, p99: 99, mean: 50.5 });
    assert.deepEqual(percentiles([7]), { p50: 7, p90: 7, p99: 7, mean: 7 });
    assert.deepEqual(percentiles([]), { p50: 0, p90: 0, p99: 0, mean: 0 });
  });
});

describe('RequestWindow', () => {
  it('summarises successes and failures of one version over the window', () => {
    const w = new RequestWindow(64);
    for (let i = 1; i <= 10; i++) w.recordSuccess('m', '1', `r${i}`, times(i, { queue_ms: 0.5 }), 4, 2, 'b64');
    w.recordFailure('m', '1', 'bad1', 0.2, 'SHAPE_MISMATCH');
    w.recordFailure('m', '1', 'bad2', 0.3, 'SHAPE_MISMATCH');
    w.recordFailure('m', '1', 'bad3', 0.1, 'TIMEOUT');
    w.recordSuccess('other', '1', 'o1', times(100), 1, 1, 'array');

    const s = w.summary('m', '1', 60_000);
    assert.equal(s.requests, 13);
    assert.equal(s.succeeded, 10);
    assert.equal(s.failed, 3);
    assert.equal(s.error_rate, Math.round((3 / 13) * 1000) / 1000);
    assert.deepEqual(s.top_errors, [
      { code: 'SHAPE_MISMATCH', count: 2 },
      { code: 'TIMEOUT', count: 1 },
    ]);
    assert.deepEqual(s.latency_ms, { p50: 5, p90: 9, p99: 10, mean: 5.5 });
    assert.equal(s.stages_ms.queue.mean, 0.5);
    assert.equal(s.batch_size_avg, 4);
    assert.deepEqual(s.forms, { b64: 10 });
    assert.ok(s.throughput_rps > 0 && s.rows_per_s > 0);
    assert.equal(w.summary('missing', '1', 60_000).requests, 0);
  });

  it('drops requests older than the window', () => {
    const w = new RequestWindow(16);
    w.recordSuccess('m', '1', 'a', times(1), 1, 1, 'array');
    const later = Date.now() + 120_000;
    assert.equal(w.summary('m', '1', 60_000, later).requests, 0);
    assert.equal(w.summary('m', '1', 600_000, later).requests, 1);
  });

  it('keeps only the newest `capacity` requests and finds them by id', () => {
    const w = new RequestWindow(8);
    for (let i = 0; i < 20; i++) w.recordSuccess('m', '1', `r${i}`, times(i), 1, 1, 'path');
    assert.equal(w.summary('m', '1', 60_000).requests, 8);
    assert.equal(w.find('r3'), undefined);
    const found = w.find('r19');
    assert.equal(found?.model, 'm');
    assert.equal(found?.timings.total_ms, 19);
    assert.equal(found?.form, 'path');
    const recent = w.recent('m', '1', 60_000, 3);
    assert.deepEqual(
      recent.map((r) => r.request_id),
      ['r19', 'r18', 'r17'],
    );
  });

  it('keeps failures naming no model under model ""', () => {
    const w = new RequestWindow(8);
    w.recordFailure(undefined, undefined, 'x', 0.1, 'MODEL_NOT_FOUND');
    assert.deepEqual(w.summary('', '', 60_000).top_errors, [{ code: 'MODEL_NOT_FOUND', count: 1 }]);
    assert.deepEqual(w.keys(), [{ model: '', version: '' }]);
  });
});
