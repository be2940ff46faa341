import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway.js';
import { toNumbers } from '../../src/tensor/tensor.js';
import { openGateway } from '../helpers/gateway.js';
import { eagerModel, ensureTestModels } from '../helpers/models.js';

/**
 * The worker's pipeline, with real workers: a model with short passes is sent its next request
 * while it runs one, every caller still gets its own answer, bit-identical to a run alone, the
 * wait behind the pass ahead counts as queue time, and a worker killed with two requests in its
 * pipeline leaves neither unanswered.
 */

/**
 * An eager model that sleeps as many milliseconds as its input's first element says, then returns
 * `x * 2`: a test sets each pass's length (short ones are sent ahead, see PIPELINE_MAX_PASS_MS).
 */
function pauseModel(
  work: string,
  name: string,
  idempotent: boolean,
  batching?: Record<string, number>,
  resources?: Record<string, unknown>,
): string {
  return eagerModel(
    work,
    name,
    [
      'import time',
      'import torch',
      '',
      'class Pause(torch.nn.Module):',
      '    def forward(self, x):',
      '        time.sleep(float(x[0, 0]) / 1000)',
      '        return x * 2',
      '',
      'def build():',
      '    return Pause()',
      '',
    ],
    { idempotent, ...(batching ? { batching } : {}), ...(resources ? { resources } : {}) },
  );
}

/** Turns the event loop until `done` holds (at most 1000 turns). */
async function nextTurns(done: () => boolean, what: string): Promise<void> {
  for (let turn = 0; !done(); turn++) {
    if (turn === 1000) assert.fail(`not reached: ${what}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('worker pipeline', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let models: string;
  let work: string;

  const values = (uri: string) => [...toNumbers(gateway.store.get(uri).tensor)];
  const stats = (model: string) => gateway.poolStats(model, '1');

  before(async () => {
    models = ensureTestModels();
    work = mkdtempSync(join(tmpdir(), 'tg-pipeline-'));
    gateway = await openGateway(work);
    await gateway.register(join(models, 'mlp'));
    await gateway.register(pauseModel(work, 'pause', false));
    await gateway.register(pauseModel(work, 'pause-idem', true));
    await gateway.register(pauseModel(work, 'pause-batched', false, { max_batch_size: 2, max_queue_delay_us: 1000 }));
    // The worker's own pipelining (CUDA's default), turned on here on the CPU.
    await gateway.register(pauseModel(work, 'pause-piped', false, undefined, { pipeline: true }));
  });

  after(async () => {
    await gateway.close();
  });

  it('sends the next request ahead and gives every caller its own answer, as a run alone does', async () => {
    const inputs = Array.from({ length: 48 }, (_, i) => [[i, -i / 3, i % 7, 1 / (i + 1)]]);
    // Alone: one request at a time, nothing to send ahead (this also measures the first passes).
    const alone: Awaited<ReturnType<Gateway['infer']>>[] = [];
    for (const x of inputs) alone.push(await gateway.infer({ model: 'mlp', inputs: { x } }));
    assert.equal(stats('mlp')?.pipelined, 0, 'one caller at a time never fills the pipeline');

    const together = await Promise.all(inputs.map((x) => gateway.infer({ model: 'mlp', inputs: { x } })));
    assert.ok((stats('mlp')?.pipelined ?? 0) > 0, 'requests were sent while the worker ran others');
    for (const [i, result] of together.entries()) {
      assert.equal(result.batch_size, 1);
      const mine = result.outputs.map((o) => [o.name, values(o.uri as string)]);
      const expected = alone[i]?.outputs.map((o) => [o.name, values(o.uri as string)]);
      assert.deepEqual(mine, expected, `caller ${i}`);
    }
  });

  it('counts the wait behind the pass ahead as queue time, not transfer', async () => {
    await gateway.infer({ model: 'pause', inputs: { x: [[1, 0, 0, 0]] } }); // a short pass, measured
    const before = stats('pause')?.pipelined ?? 0;
    const [first, second] = await Promise.all([
      gateway.infer({ model: 'pause', inputs: { x: [[100, 0, 0, 0]] } }),
      gateway.infer({ model: 'pause', inputs: { x: [[1, 0, 0, 0]] } }),
    ]);
    assert.equal(stats('pause')?.pipelined, before + 1, 'the second was sent while the first ran');
    assert.ok(first && second);
    // The second waited inside the worker for the first's whole pass, a sleep of 100 ms.
    const pass = first.timings.compute_ms;
    assert.ok(pass >= 100, `the first pass slept: ${pass} ms`);
    assert.ok(second.timings.queue_ms >= pass / 2, `queued behind it: ${JSON.stringify(second.timings)}`);
    assert.ok(second.timings.transfer_ms < pass / 2, `not counted as transfer: ${JSON.stringify(second.timings)}`);
  });

  it('a pipelining worker begins the request sent ahead before it answers the one it ran', async () => {
    const model = 'pause-piped';
    await gateway.infer({ model, inputs: { x: [[1, 0, 0, 0]] } }); // a short pass, measured
    const before = stats(model)?.pipelined ?? 0;
    // A 5 ms pass, and a 150 ms one sent ahead of it: the worker finds the second waiting when
    // the first pass ends and begins it (on the CPU, runs its whole pass) before it answers the
    // first. So the first answer comes after the second pass, which a worker that answers first
    // (the test above) never does; both answers are their own callers'.
    const [first, second] = await Promise.all([
      gateway.infer({ model, inputs: { x: [[5, 1, 2, 3]] } }),
      gateway.infer({ model, inputs: { x: [[150, 4, 5, 6]] } }),
    ]);
    assert.equal(stats(model)?.pipelined, before + 1, 'the second was sent while the first ran');
    assert.ok(first && second);
    assert.deepEqual(values(first.outputs[0]?.uri as string), [10, 2, 4, 6]);
    assert.deepEqual(values(second.outputs[0]?.uri as string), [300, 8, 10, 12]);
    assert.ok(first.timings.compute_ms < 100, `the first pass was short: ${JSON.stringify(first.timings)}`);
    assert.ok(first.timings.total_ms >= 140, `answered after the second pass: ${JSON.stringify(first.timings)}`);
    // Many callers at once: every one gets its own rows back, in spite of the early starts.
    const inputs = Array.from({ length: 32 }, (_, i) => [[0, i, -i / 3, 1 / (i + 1)]]);
    const results = await Promise.all(inputs.map((x) => gateway.infer({ model, inputs: { x } })));
    for (const [i, result] of results.entries())
      assert.deepEqual(
        values(result.outputs[0]?.uri as string),
        inputs[i]?.[0]?.map((v) => Math.fround(v) * 2),
        `caller ${i}`,
      );
  });

  it('sends nothing ahead of a long pass: the request stays in the queue, where it can be withdrawn', async () => {
    await gateway.infer({ model: 'pause', inputs: { x: [[50, 0, 0, 0]] } }); // a pass past PIPELINE_MAX_PASS_MS
    const before = stats('pause')?.pipelined ?? 0;
    const first = gateway.infer({ model: 'pause', inputs: { x: [[50, 0, 0, 0]] } });
    const abort = new AbortController();
    const second = gateway.infer({ model: 'pause', inputs: { x: [[1, 0, 0, 0]] } }, { signal: abort.signal });
    await nextTurns(() => stats('pause')?.queued === 1, 'the second queued');
    abort.abort();
    await assert.rejects(second, { code: 'CANCELLED' });
    await first;
    assert.equal(stats('pause')?.pipelined, before, 'not sent ahead');
    assert.equal(stats('pause')?.queued, 0, 'withdrawn');
  });

  it('sends a batch ahead only when it is full: one that could still grow waits in the queue', async () => {
    const model = 'pause-batched';
    await gateway.infer({ model, inputs: { x: [[1, 0, 0, 0]] } }); // a short pass, measured
    const before = stats(model)?.pipelined ?? 0;
    const running = gateway.infer({ model, inputs: { x: [[100, 0, 0, 0]] } }); // alone: runs at once
    await nextTurns(() => stats(model)?.busy === 1, 'the first pass running');
    const second = gateway.infer({ model, inputs: { x: [[1, 0, 0, 0]] } });
    await nextTurns(() => stats(model)?.queued === 1, 'the second queued');
    await new Promise((resolve) => setTimeout(resolve, 10)); // long past a drain, well inside the pass
    assert.equal(stats(model)?.pipelined, before, 'a batch of 1 of 2 is not sent ahead');
    const third = gateway.infer({ model, inputs: { x: [[1, 1, 1, 1]] } });
    const results = await Promise.all([running, second, third]);
    assert.equal(stats(model)?.pipelined, before + 1, 'the full batch was');
    assert.deepEqual(
      results.map((r) => r.batch_size),
      [1, 2, 2],
    );
    assert.deepEqual(values(results[2]?.outputs[0]?.uri as string), [2, 2, 2, 2]);
  });

  it("never sends a batch job's request ahead: an interactive request that comes later goes first", async () => {
    await gateway.infer({ model: 'pause', inputs: { x: [[1, 0, 0, 0]] } }); // a short pass, measured
    const before = stats('pause')?.pipelined ?? 0;
    const answered: string[] = [];
    const note = (what: string) => (r: unknown) => {
      answered.push(what);
      return r;
    };
    const running = gateway.infer({ model: 'pause', inputs: { x: [[100, 0, 0, 0]] } }).then(note('running'));
    await nextTurns(() => stats('pause')?.busy === 1, 'the first pass running');
    const job = gateway
      .infer({ model: 'pause', inputs: { x: [[1, 0, 0, 0]] } }, { adapter: 'job' })
      .then(note('batch job'));
    await nextTurns(() => stats('pause')?.queued === 1, "the batch job's request queued");
    assert.equal(stats('pause')?.pipelined, before, 'not sent ahead');
    const interactive = gateway.infer({ model: 'pause', inputs: { x: [[1, 0, 0, 0]] } }).then(note('interactive'));
    await Promise.all([running, job, interactive]);
    assert.equal(stats('pause')?.pipelined, before + 1, 'the interactive one was');
    assert.deepEqual(answered, ['running', 'interactive', 'batch job']);
  });

  it('answers both requests in a killed worker’s pipeline: retried for an idempotent model, failed for another', async () => {
    for (const model of ['pause-idem', 'pause', 'pause-piped']) {
      await gateway.infer({ model, inputs: { x: [[1, 0, 0, 0]] } }); // a short pass, measured
      const victim = stats(model)?.pids[0];
      assert.ok(victim);
      const before = stats(model)?.pipelined ?? 0;
      // A pass of 300 ms, and one sent ahead of it: the kill comes while both are in the worker.
      const calls = [300, 1].map((ms) => gateway.infer({ model, inputs: { x: [[ms, 1, 2, 3]] } }));
      await nextTurns(() => stats(model)?.pipelined === before + 1, `${model}: both in the worker's pipeline`);
      process.kill(victim, 'SIGKILL');
      const settled = await Promise.allSettled(calls);
      if (model === 'pause-idem') {
        for (const [i, s] of settled.entries()) {
          assert.equal(s.status, 'fulfilled', `${model}: retried on a fresh worker`);
          assert.deepEqual(values(s.value.outputs[0]?.uri as string), [[600, 2][i], 2, 4, 6]);
        }
      } else {
        for (const s of settled) {
          assert.equal(s.status, 'rejected');
          assert.equal((s.reason as { code: string }).code, 'WORKER_CRASHED');
        }
      }
      assert.notEqual(stats(model)?.pids[0], victim);
    }
  });
});
