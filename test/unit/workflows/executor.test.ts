import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TensorgateError } from '../../../src/errors.js';
import { tgError } from '../../../src/errors.js';
import { makeTensor, type Tensor } from '../../../src/tensor/tensor.js';
import { compileWorkflow, parseWorkflowDefinition } from '../../../src/workflows/definition.js';
import { executeWorkflow, type StageCaller } from '../../../src/workflows/executor.js';

/**
 * The scheduler on its own, with stages whose timing the test controls: what starts when, what
 * a cancellation or a timeout reaches. The real models run in test/e2e/workflows.test.ts.
 */

const spec = { name: 'x', dtype: 'float32' as const, shape: [-1, 4] };
const ident = { inputs: [spec], outputs: [{ ...spec, name: 'y' }], models: ['ident'], workflows: [] };
const plan = compileWorkflow(
  parseWorkflowDefinition(
    {
      name: 'w',
      inputs: [spec],
      steps: [
        { stage: 'a', model: 'ident', inputs: { x: 'x' } },
        { stage: 'b', model: 'ident', inputs: { x: 'x' } },
        { stage: 'c', model: 'ident', inputs: { x: 'a.y' } },
      ],
      outputs: { y: 'c.y', b: 'b.y' },
    },
    'test',
  ),
  { model: (n) => (n === 'ident' ? ident : undefined), workflow: () => undefined },
);
const x = makeTensor('float32', [1, 4], new Uint8Array(16));
const timings = { decode_ms: 0, queue_ms: 0, transfer_ms: 0, compute_ms: 0, encode_ms: 0, total_ms: 0 };

/** Stages that wait until the test releases them, or until their signal aborts. */
function controlledCaller() {
  const calls: { stage: string; signal: AbortSignal; timeoutMs: number; release: () => void }[] = [];
  const caller: StageCaller = {
    model: (_target, _version, inputs, { signal, timeoutMs, requestId }) =>
      new Promise((resolve, reject) => {
        const stage = requestId.split('/').pop() as string;
        signal.addEventListener('abort', () => reject(tgError('CANCELLED', `${stage} withdrawn`)));
        calls.push({
          stage,
          signal,
          timeoutMs,
          release: () =>
            resolve({
              version: '1',
              outputs: [{ name: 'y', tensor: inputs.get('x') as Tensor }],
              timings,
              batch_size: 1,
            }),
        });
      }),
    workflow: () => Promise.reject(new Error('no nested workflows here')),
  };
  return { caller, calls };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('workflow executor', () => {
  it('starts independent stages together and a dependent one only when its input exists', async () => {
    const { caller, calls } = controlledCaller();
    const running = executeWorkflow(plan, new Map([['x', x]]), caller, { timeoutMs: 5000, requestId: 'r' });
    await tick();
    assert.deepEqual(
      calls.map((c) => c.stage),
      ['a', 'b'],
    );
    calls[1]?.release(); // b first: c still waits for a
    await tick();
    assert.equal(calls.length, 2);
    calls[0]?.release();
    await tick();
    assert.deepEqual(
      calls.map((c) => c.stage),
      ['a', 'b', 'c'],
    );
    calls[2]?.release();
    const run = await running;
    assert.deepEqual(
      run.outputs.map((o) => ('tensor' in o ? [o.name, o.from] : [o.name])),
      [
        ['y', 'c.y'],
        ['b', 'b.y'],
      ],
    );
    assert.ok(run.stages.every((s) => s.status === 'ok'));
  });

  it('withdraws every running stage when the caller cancels, and says which', async () => {
    const { caller, calls } = controlledCaller();
    const cancel = new AbortController();
    const running = executeWorkflow(plan, new Map([['x', x]]), caller, {
      timeoutMs: 5000,
      requestId: 'r',
      signal: cancel.signal,
    });
    await tick();
    cancel.abort();
    await assert.rejects(running, (err: TensorgateError) => {
      assert.equal(err.code, 'CANCELLED');
      const stages = err.data.stages as { stage: string; status: string }[];
      assert.deepEqual(
        stages.map((s) => [s.stage, s.status]),
        [
          ['a', 'cancelled'],
          ['b', 'cancelled'],
          ['c', 'not_run'],
        ],
      );
      return true;
    });
    assert.ok(
      calls.every((c) => c.signal.aborted),
      'each stage call saw the abort',
    );
  });

  it('gives each stage what is left of the timeout, and fails the whole graph when it runs out', async () => {
    const { caller, calls } = controlledCaller();
    const running = executeWorkflow(plan, new Map([['x', x]]), caller, { timeoutMs: 200, requestId: 'r' });
    // The executor took its start before returning, so time measured from here is a lower bound on what
    // it has spent. Timers may fire a little early against performance.now(), so the bound is measured,
    // not assumed to be the 30 ms asked of setTimeout.
    const started = performance.now();
    await tick();
    assert.ok((calls[0]?.timeoutMs as number) <= 200 && (calls[0]?.timeoutMs as number) > 100);
    await new Promise((r) => setTimeout(r, 30));
    const spentBeforeRelease = performance.now() - started;
    calls[0]?.release();
    await tick();
    const left = calls[2]?.timeoutMs as number;
    assert.ok(left <= 200 - spentBeforeRelease, `c got ${left} ms, after a's ${spentBeforeRelease} ms`);
    assert.ok(left < 180, `c got ${left} ms: a's time was not taken off`);
    await assert.rejects(running, (err: TensorgateError) => {
      assert.equal(err.code, 'TIMEOUT');
      assert.match(err.message, /did not finish within 200 ms \("b", "c" still running\)/);
      return true;
    });
  });
});
