import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway.js';
import { toNumbers } from '../../src/tensor/tensor.js';
import { modelCopy, openGateway } from '../helpers/gateway.js';
import { eagerModel, ensureTestModels } from '../helpers/models.js';
import { workerPids } from '../helpers/processes.js';
import { waitFor } from '../helpers/wait.js';

/**
 * Faults, for real: a full queue, deadlines, cancellation, a worker killed mid-request for an
 * idempotent model, and a model that can no longer load after a crash.
 */

describe('faults', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let models: string;
  let work: string;

  const variant = (fixture: string, name: string, edit: (c: Record<string, unknown>) => void) =>
    modelCopy(models, fixture, work, name, edit);

  const x = [[1, 2, 3, 4]];

  before(async () => {
    models = ensureTestModels();
    work = mkdtempSync(join(tmpdir(), 'tg-faults-'));
    gateway = await openGateway(work);
    await gateway.register(variant('sleepy', 'sleepy-q2', (c) => Object.assign(c, { max_queue_size: 2 })));
    await gateway.register(variant('sleepy', 'sleepy-idem', (c) => Object.assign(c, { idempotent: true })));
  });

  after(async () => {
    await gateway.close();
  });

  it("spreads requests over a model's instances, each its own worker process", async () => {
    await gateway.register(
      variant('sleepy', 'sleepy-x2', (c) => {
        c.resources = { ...(c.resources as object), instances: 2 };
      }),
    );
    assert.equal(new Set(gateway.poolStats('sleepy-x2', '1')?.pids).size, 2);
    const calls = [1, 2, 3].map(() => gateway.infer({ model: 'sleepy-x2', inputs: { x } }));
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(
      [gateway.poolStats('sleepy-x2', '1')?.busy, gateway.poolStats('sleepy-x2', '1')?.queued],
      [2, 1],
      'two run at once, the third waits for the first idle instance',
    );
    await Promise.all(calls);
    await gateway.unloadModel('sleepy-x2');
  });

  it('answers QUEUE_FULL at once when the queue is full, and serves the rest', async () => {
    const running = gateway.infer({ model: 'sleepy-q2', inputs: { x } });
    await new Promise((r) => setTimeout(r, 50)); // the first is running, the queue is empty
    const queued = [
      gateway.infer({ model: 'sleepy-q2', inputs: { x } }),
      gateway.infer({ model: 'sleepy-q2', inputs: { x } }),
    ];
    await assert.rejects(gateway.infer({ model: 'sleepy-q2', inputs: { x } }), {
      code: 'QUEUE_FULL',
      message: /2 requests waiting/,
    });
    const results = await Promise.all([running, ...queued]);
    assert.equal(results.length, 3);
  });

  it('times out a request that waits too long, and drops it from the queue', async () => {
    const first = gateway.infer({ model: 'sleepy-q2', inputs: { x } });
    const late = gateway.infer({ model: 'sleepy-q2', inputs: { x }, parameters: { timeout_ms: 100 } });
    await assert.rejects(late, { code: 'TIMEOUT', message: /100 ms/ });
    assert.equal(gateway.poolStats('sleepy-q2', '1')?.queued, 0, 'withdrawn from the queue');
    await first;
    await assert.rejects(gateway.infer({ model: 'sleepy-q2', inputs: { x }, parameters: { timeout_ms: 50 } }), {
      code: 'TIMEOUT',
    }); // running when its deadline passes: answered at once, the late result is dropped
  });

  it('withdraws a queued request when its caller cancels', async () => {
    while ((gateway.poolStats('sleepy-q2', '1')?.busy ?? 0) > 0) await new Promise((r) => setTimeout(r, 50));
    const before = gateway.poolStats('sleepy-q2', '1')?.batches[1] ?? 0;
    const first = gateway.infer({ model: 'sleepy-q2', inputs: { x } });
    const abort = new AbortController();
    const second = gateway.infer({ model: 'sleepy-q2', inputs: { x } }, { signal: abort.signal });
    setTimeout(() => abort.abort(), 50);
    await assert.rejects(second, { code: 'CANCELLED' });
    await first;
    await new Promise((r) => setTimeout(r, 600)); // long enough for a forward pass, had it run
    assert.equal(gateway.poolStats('sleepy-q2', '1')?.batches[1], before + 1, 'the cancelled request never ran');
  });

  it('retries once on a fresh worker when an idempotent model crashes mid-request', async () => {
    const [victim] = gateway.poolStats('sleepy-idem', '1')?.pids ?? [];
    assert.ok(victim);
    const running = gateway.infer({ model: 'sleepy-idem', inputs: { x } });
    await new Promise((r) => setTimeout(r, 150));
    process.kill(victim, 'SIGKILL');
    const result = await running;
    assert.deepEqual(result.outputs[0]?.shape, [1, 4]);
    assert.ok(!workerPids().includes(victim), 'served by a fresh worker');
    assert.equal(gateway.poolStats('sleepy-idem', '1')?.restarts, 1);
  });

  /**
   * An eager model whose factory exits with code 3 while a file named `broken` lies beside it,
   * noting each such exit in `attempts`: a model that loads, then cannot load again.
   */
  function fragileModel(name: string, instances: number): string {
    return eagerModel(
      work,
      name,
      [
        'import os',
        'import torch',
        '',
        'class Plus(torch.nn.Module):',
        '    def forward(self, x):',
        '        return x + 1',
        '',
        'def build():',
        '    here = os.path.dirname(__file__)',
        '    if os.path.exists(os.path.join(here, "broken")):',
        '        with open(os.path.join(here, "attempts"), "a") as f:',
        '            f.write("x")',
        '        os._exit(3)',
        '    return Plus()',
        '',
      ],
      { resources: { instances } },
    );
  }

  it('gives up on an instance that cannot load again after a crash: failed, with the last error', async () => {
    const dir = fragileModel('fragile', 1);
    const info = await gateway.register(dir);
    assert.equal(info.versions[0]?.state, 'ready');
    writeFileSync(join(dir, '1', 'broken'), '');
    await gateway.infer({ model: 'fragile', inputs: { x } });
    const [victim] = gateway.poolStats('fragile', '1')?.pids ?? [];
    assert.ok(victim);
    process.kill(victim, 'SIGKILL');
    await waitFor('fragile failed', () =>
      gateway.modelInfo('fragile').versions[0]?.state === 'failed' ? true : undefined,
    );
    const version = gateway.modelInfo('fragile').versions[0];
    assert.equal(version?.state, 'failed');
    assert.match(version?.error ?? '', /exited with code 3/);
    await assert.rejects(gateway.infer({ model: 'fragile', inputs: { x } }), /exited with code 3/);
    // Everything else still serves.
    await gateway.infer({ model: 'sleepy-q2', inputs: { x } });
  });

  it('keeps trying an instance that cannot load while another serves, and gets it back', async () => {
    const dir = fragileModel('fragile-pair', 2);
    assert.equal((await gateway.register(dir)).versions[0]?.state, 'ready');
    const pids = () => gateway.poolStats('fragile-pair', '1')?.pids ?? [];
    const [victim, survivor] = pids();
    assert.ok(victim && survivor);
    writeFileSync(join(dir, '1', 'broken'), '');
    process.kill(victim, 'SIGKILL');
    const attempts = () => {
      try {
        return readFileSync(join(dir, '1', 'attempts'), 'utf8').length;
      } catch {
        return 0;
      }
    };
    // Three failed restarts would fail a version with no other instance; this one still serves.
    await waitFor('three failed restarts', () => (attempts() >= 3 ? true : undefined));
    const state = gateway.modelInfo('fragile-pair').versions[0]?.state;
    assert.equal(state, 'ready');
    assert.deepEqual(pids(), [survivor]);
    const answer = await gateway.infer({ model: 'fragile-pair', inputs: { x } });
    assert.deepEqual([...toNumbers(gateway.store.get(answer.outputs[0]?.uri as string).tensor)], [2, 3, 4, 5]);
    // Once the instance can load again, its next try brings it back.
    rmSync(join(dir, '1', 'broken'));
    await waitFor('both instances serving', () => (pids().length === 2 ? true : undefined));
    assert.ok(pids().includes(survivor));
    assert.ok(!pids().includes(victim));
    assert.equal(gateway.modelInfo('fragile-pair').versions[0]?.state, 'ready');
  });
});

describe('shutdown', { timeout: 120_000 }, () => {
  it('finishes running requests within the grace period, then leaves no shared memory behind', async () => {
    const models = ensureTestModels();
    const work = mkdtempSync(join(tmpdir(), 'tg-stop-'));
    const gateway = await openGateway(work);
    await gateway.register(join(models, 'sleepy'));
    const running = gateway.infer({ model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } });
    const queued = gateway.infer({ model: 'sleepy', inputs: { x: [[5, 6, 7, 8]] } });
    await new Promise((r) => setTimeout(r, 50));
    const closing = gateway.close(5_000);
    await assert.rejects(gateway.infer({ model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } }), { code: 'SHUTTING_DOWN' });
    const [a, b] = await Promise.all([running, queued]);
    assert.deepEqual(
      [a.outputs[0]?.shape, b.outputs[0]?.shape],
      [
        [1, 4],
        [1, 4],
      ],
    );
    await closing;
    assert.deepEqual(
      readdirSync('/dev/shm').filter((n) => n.startsWith(`tensorgate-${process.pid}-`)),
      [],
    );
  });
});
