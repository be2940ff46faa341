import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { InferenceResult } from '../../../src/gateway.js';
import { JobManager } from '../../../src/jobs/job-manager.js';
import type { ModelConfig } from '../../../src/registry/model-config.js';
import { SqliteStore } from '../../../src/registry/sqlite-store.js';
import type { InferenceRequest } from '../../../src/requests/inference-request.js';

/**
 * How a job sizes its requests: as many items as the model gets through in max_pass_ms at the
 * pace its passes report, starting at one and at most doubling, never over the batch. The model
 * here is a stand-in that reports a pass of `perRowMs` a row (the policy is under test, not the
 * model: test/e2e/jobs.test.ts runs jobs on real workers).
 */

async function requestSizes(perRowMs: number, spec: Record<string, unknown> = {}): Promise<number[]> {
  const dir = mkdtempSync(join(tmpdir(), 'tg-job-size-'));
  writeFileSync(join(dir, 'texts.txt'), Array.from({ length: 300 }, (_, i) => `text ${i}`).join('\n'));
  const store = new SqliteStore(join(dir, 'registry.db'));
  const sizes: number[] = [];
  const jobs = new JobManager({
    async infer(request: InferenceRequest): Promise<InferenceResult> {
      const items = (request.inputs.text as string[]).length;
      sizes.push(items);
      await new Promise((resolve) => setImmediate(resolve));
      return {
        request_id: 'r',
        model: 'm',
        version: '1',
        variant: 'torch-fp32',
        batch_size: items,
        outputs: [],
        answers: Array.from({ length: items }, () => 'ok'),
        timings: {
          decode_ms: 0,
          preprocess_ms: 0,
          queue_ms: 0,
          transfer_ms: 0,
          compute_ms: perRowMs * items,
          encode_ms: 0,
          total_ms: perRowMs * items,
        },
        notes: [],
      };
    },
    inferTensors: () => Promise.reject(new Error('a job over texts sends no tensors')),
    modelConfig: () =>
      ({ name: 'm', processing: { inputs: { text: {} } }, batching: { max_batch_size: 32 } }) as unknown as ModelConfig,
    workflowPlan: () => ({ processed: [], models: [] }),
    runWorkflow: async () => [],
    allowedRoots: [dir],
    store,
    interactiveSince: () => false,
    interactiveQuietMs: () => Number.POSITIVE_INFINITY,
    log: () => {},
  });
  const job = await jobs.start(
    { model: 'm', items: { lines: join(dir, 'texts.txt') }, results: join(dir, 'out.jsonl'), ...spec },
    null,
  );
  const done = await jobs.settled(job.id);
  assert.equal(done.state, 'completed');
  assert.equal(done.done, 300);
  store.close();
  return sizes;
}

describe('job request size', () => {
  it('grows from one item, doubling, to what fits in 100 ms at 10 ms a row', async () => {
    const sizes = await requestSizes(10);
    assert.equal(sizes[0], 1);
    assert.ok(Math.max(...sizes) <= 10, `sizes ${sizes.join(' ')}`);
    assert.ok(sizes.filter((n) => n === 10).length > 10, `mostly full: ${sizes.join(' ')}`);
    sizes.slice(1).forEach((n, i) => {
      assert.ok(n <= 2 * Math.max(...sizes.slice(0, i + 1)), `doubles at most: ${sizes.join(' ')}`);
    });
  });

  it('runs full batches on a model fast enough (a GPU) and single items when a row takes longer than max_pass_ms', async () => {
    const fast = await requestSizes(0.05);
    assert.ok(fast.filter((n) => n === 32).length >= 5, `batch 32 reached: ${fast.join(' ')}`);
    assert.ok(Math.max(...fast) <= 32);
    const slow = await requestSizes(10, { max_pass_ms: 5 });
    assert.deepEqual([...new Set(slow)], [1]);
  });
});
