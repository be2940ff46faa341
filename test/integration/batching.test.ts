import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway.js';
import { toNumbers } from '../../src/tensor/tensor.js';
import { modelCopy, openGateway } from '../helpers/gateway.js';
import { ensureTestModels } from '../helpers/models.js';

/**
 * Dynamic batching with real workers: concurrent requests are joined into one forward pass and
 * every caller gets exactly its own rows back, bit-identical to an unbatched run.
 */

describe('dynamic batching', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let models: string;
  let work: string;

  /** Copies a fixture model under a new name with a batching section added. */
  function withBatching(
    fixture: string,
    name: string,
    batching: Record<string, unknown>,
    edit?: (c: Record<string, unknown>) => void,
  ) {
    return modelCopy(models, fixture, work, name, (config) => {
      config.batching = batching;
      edit?.(config);
    });
  }

  const values = (uri: string) => [...toNumbers(gateway.store.get(uri).tensor)];

  before(async () => {
    models = ensureTestModels();
    work = mkdtempSync(join(tmpdir(), 'tg-batch-'));
    gateway = await openGateway(work);
    await gateway.register(
      withBatching('sleepy', 'sleepy-batched', { max_batch_size: 8, max_queue_delay_us: 200_000 }),
    );
    await gateway.register(join(models, 'sleepy'));
    await gateway.register(withBatching('adder', 'adder-batched', { max_batch_size: 16, max_queue_delay_us: 100_000 }));
    await gateway.register(withBatching('flaky', 'flaky-batched', { max_batch_size: 8, max_queue_delay_us: 100_000 }));
    await gateway.register(
      withBatching('adder', 'adder-adaptive', { max_batch_size: 16, max_queue_delay_us: 300_000 }),
    );
    await gateway.register(
      withBatching('adder', 'adder-fixed', { max_batch_size: 16, max_queue_delay_us: 300_000, adaptive_delay: false }),
    );
  });

  after(async () => {
    await gateway.close();
  });

  it('joins concurrent requests into one forward pass and gives each caller its own rows', async () => {
    const inputs = [
      [[1, 2, 3, 4]],
      [[5, 6, 7, 8]],
      [[0.5, -1, 1e-3, 7]],
      [
        [9, 9, 9, 9],
        [10, 11, 12, 13],
      ],
      [[-2, -4, 0, 3]],
    ];
    const batched = await Promise.all(inputs.map((x) => gateway.infer({ model: 'sleepy-batched', inputs: { x } })));
    assert.deepEqual(gateway.poolStats('sleepy-batched', '1')?.batches, { 6: 1 }, 'one forward pass of 6 rows');
    for (const result of batched) assert.equal(result.batch_size, 6);
    // Unbatched reference: the same model without batching, one request at a time.
    for (const [i, x] of inputs.entries()) {
      const alone = await gateway.infer({ model: 'sleepy', inputs: { x } });
      assert.equal(alone.batch_size, x.length);
      const mine = batched[i]?.outputs[0];
      assert.deepEqual(mine?.shape, [x.length, 4]);
      assert.deepEqual(values(mine?.uri as string), values(alone.outputs[0]?.uri as string), `request ${i}`);
    }
  });

  it("runs an interactive request ahead of a batch job's queued requests", async () => {
    // One instance sleeping 0.5 s per pass: the first job request runs, the rest queue.
    const order: string[] = [];
    const call = (name: string, adapter: 'job' | 'mcp') =>
      gateway.infer({ model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } }, { adapter }).then(() => order.push(name));
    const running = call('job 1', 'job');
    await new Promise((r) => setTimeout(r, 100));
    const queued = [call('job 2', 'job'), call('job 3', 'job')];
    await new Promise((r) => setTimeout(r, 50));
    const interactive = call('interactive', 'mcp');
    await Promise.all([running, ...queued, interactive]);
    assert.deepEqual(order, ['job 1', 'interactive', 'job 2', 'job 3']);
  });

  it('sends a lone request at once under light traffic, and waits again once a pass carried company', async () => {
    const one = (model: string) => gateway.infer({ model, inputs: { a: [[1, 2]], b: [[3, 4]] } });
    // Light traffic: each pass carries one request, so none waits for the 300 ms delay.
    for (let i = 0; i < 3; i++) assert.ok((await one('adder-adaptive')).timings.queue_ms < 150, `lone request ${i}`);
    // A burst forms a batch; the next lone request then waits for company again.
    const burst = await Promise.all([1, 2, 3].map(() => one('adder-adaptive')));
    assert.ok(
      burst.some((r) => r.batch_size > 1),
      'the burst shares a pass',
    );
    assert.ok((await one('adder-adaptive')).timings.queue_ms >= 290, 'after a batch, the delay applies');
    // ...until a pass carries it alone: light traffic again.
    assert.ok((await one('adder-adaptive')).timings.queue_ms < 150, 'light traffic again');
    // adaptive_delay: false keeps Triton's fixed delay.
    assert.ok((await one('adder-fixed')).timings.queue_ms >= 290, 'fixed delay');
  });

  it('never joins requests whose non-batch dimensions differ', async () => {
    const [narrow, wide, narrow2] = await Promise.all([
      gateway.infer({ model: 'adder-batched', inputs: { a: [[1, 2, 3]], b: [[1, 1, 1]] } }),
      gateway.infer({ model: 'adder-batched', inputs: { a: [[1, 2, 3, 4, 5]], b: [[1, 1, 1, 1, 1]] } }),
      gateway.infer({ model: 'adder-batched', inputs: { a: [[7, 8, 9]], b: [[1, 1, 1]] } }),
    ]);
    assert.deepEqual(gateway.poolStats('adder-batched', '1')?.batches, { 1: 1, 2: 1 });
    assert.equal(wide?.batch_size, 1);
    assert.equal(narrow?.batch_size, 2);
    assert.deepEqual(values(narrow?.outputs[0]?.uri as string), [2, 3, 4]);
    assert.deepEqual(values(narrow2?.outputs[0]?.uri as string), [8, 9, 10]);
    assert.deepEqual(values(wide?.outputs[0]?.uri as string), [2, 3, 4, 5, 6]);
  });

  it('fails only the request whose data breaks a batch', async () => {
    const [good, bad, good2] = await Promise.allSettled([
      gateway.infer({ model: 'flaky-batched', inputs: { x: [[1, 2, 3, 4]] } }),
      gateway.infer({ model: 'flaky-batched', inputs: { x: [[1, -2, 3, 4]] } }),
      gateway.infer({ model: 'flaky-batched', inputs: { x: [[0, 0, 0, 0]] } }),
    ]);
    assert.equal(bad?.status, 'rejected');
    assert.equal((bad as PromiseRejectedResult).reason.code, 'INFERENCE_FAILED');
    assert.equal(good?.status, 'fulfilled');
    assert.equal(good2?.status, 'fulfilled');
    assert.deepEqual(
      values((good as PromiseFulfilledResult<Awaited<ReturnType<Gateway['infer']>>>).value.outputs[0]?.uri as string),
      [2, 3, 4, 5],
    );
    const stats = gateway.poolStats('flaky-batched', '1')?.batches ?? {};
    assert.equal(stats[1], 2, 'after the failed batch of 3, each good request ran alone');
  });

  it('rejects invalid batching configs at registration, naming the field', async () => {
    await assert.rejects(gateway.register(withBatching('sleepy', 'bad-size', { max_batch_size: 0 })), {
      code: 'INVALID_CONFIG',
      message: /batching\.max_batch_size: max_batch_size must be at least 1/,
    });
    await assert.rejects(
      gateway.register(withBatching('sleepy', 'bad-delay', { max_batch_size: 4, max_queue_delay_us: -1 })),
      {
        message: /batching\.max_queue_delay_us/,
      },
    );
    const fixedBatch = (c: Record<string, unknown>) => {
      (c.inputs as { shape: number[] }[])[0] = { ...(c.inputs as object[])[0], shape: [2, 4] } as never;
    };
    await assert.rejects(gateway.register(withBatching('sleepy', 'bad-dim', { max_batch_size: 4 }, fixedBatch)), {
      message: /inputs\.0\.shape: batching needs a dynamic batch dimension: inputs "x"/,
    });
  });
});
