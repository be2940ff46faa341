import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway.js';
import type { FailedRequest, FinishedRequest } from '../../src/observability/request-observer.js';
import { openGateway } from '../helpers/gateway.js';
import { ensureTestModels } from '../helpers/models.js';

/**
 * A request's records (metrics, the request window, the request log and traces) are made after its
 * answer has been handed back, while the gateway waits for the next request's worker, and still
 * none is lost: a reader sees every request answered before it asked, a timer makes them when no
 * request follows, and closing the gateway makes what is left. A real torch worker.
 */

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe('records made after the answer', { timeout: 120_000 }, () => {
  let gateway: Gateway;
  const finished: FinishedRequest[] = [];
  const failed: FailedRequest[] = [];

  before(async () => {
    const models = ensureTestModels();
    gateway = await openGateway(mkdtempSync(join(tmpdir(), 'tg-after-')));
    await gateway.register(join(models, 'mlp'));
    gateway.observe({ finished: (r) => finished.push(r), failed: (r) => failed.push(r) });
  });

  after(async () => {
    await gateway.close();
  });

  it('answers before it records, and a reader of the window sees the request at once', async () => {
    finished.length = 0;
    const result = await gateway.infer({ model: 'mlp', inputs: { x: [[1, 2, 3, 4]] } });
    assert.equal(result.outputs[0]?.shape.join(), '1,3');
    assert.equal(finished.length, 0, 'nothing recorded before the caller had its answer');
    const record = gateway.window.find(result.request_id);
    assert.ok(record?.ok, 'the window flushes what is queued before it is read');
    assert.deepEqual(
      finished.map((r) => r.request_id),
      [result.request_id],
    );
    assert.equal(finished[0]?.timings.total_ms, result.timings.total_ms);
  });

  it('makes the records of answered requests while the next request waits for its worker', async () => {
    // The idle timer armed by an earlier test's records fires first: it would make this test's early.
    await sleep(20);
    finished.length = 0;
    let made: { busy: number | undefined; at: number } | undefined;
    const detach = gateway.observe({
      finished: () => {
        made ??= { busy: gateway.poolStats('mlp', '1')?.busy, at: performance.now() };
      },
      failed: () => {},
    });
    try {
      const first = await gateway.infer({ model: 'mlp', inputs: { x: [[1, 1, 1, 1]] } });
      const answeredAt = performance.now();
      await turn();
      await turn();
      const second = await gateway.infer({ model: 'mlp', inputs: { x: [[2, 2, 2, 2]] } });
      assert.deepEqual(
        finished.map((r) => r.request_id),
        [first.request_id],
        'the first is made; the second waits for the request after it',
      );
      assert.ok(made);
      // Made before the second was sent only if the idle timer (5 ms) was due: a slow machine.
      if (made.at - answeredAt < 4) assert.equal(made.busy, 1, 'made while the second request was with the worker');
      assert.ok(gateway.window.find(second.request_id)?.ok);
    } finally {
      detach();
    }
  });

  it('makes the records of requests answered together, every one, within the idle delay when none follows', async () => {
    finished.length = 0;
    const results = await Promise.all(
      [1, 2, 3].map((v) => gateway.infer({ model: 'mlp', inputs: { x: [[v, v, v, v]] } })),
    );
    for (let waited = 0; finished.length < 3 && waited < 5000; waited += 5) await sleep(5);
    assert.deepEqual(finished.map((r) => r.request_id).sort(), results.map((r) => r.request_id).sort());
  });

  it('records a failure after it is answered too, in the metrics as well', async () => {
    failed.length = 0;
    await assert.rejects(gateway.infer({ model: 'mlp', inputs: { x: [[1, 2]] } }), { code: 'SHAPE_MISMATCH' });
    assert.equal(failed.length, 0);
    gateway.flushRecords();
    assert.equal(failed.length, 1);
    assert.equal(failed[0]?.error.code, 'SHAPE_MISMATCH');
    assert.equal(failed[0]?.model, 'mlp');
    const text = (await gateway.metrics.render()).text;
    assert.match(text, /^tensorgate_errors_total\{code="SHAPE_MISMATCH"\} 1$/m);
  });

  it('makes the records still queued when the gateway closes', async () => {
    finished.length = 0;
    const result = await gateway.infer({ model: 'mlp', inputs: { x: [[4, 3, 2, 1]] } });
    assert.equal(finished.length, 0);
    await gateway.close();
    assert.deepEqual(
      finished.map((r) => r.request_id),
      [result.request_id],
    );
  });
});
