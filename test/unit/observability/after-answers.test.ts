import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AfterAnswers } from '../../../src/observability/after-answers.js';

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const unexpected = (err: unknown) => assert.fail(`a task threw: ${String(err)}`);
/** An idle delay no test reaches: only whileWaiting and flush run tasks. */
const NEVER_MS = 60_000;

describe('AfterAnswers', () => {
  it('runs tasks when the gateway waits, not on the turns before, in the order they were added', async () => {
    const after = new AfterAnswers(unexpected, NEVER_MS);
    const ran: number[] = [];
    for (const n of [1, 2, 3]) after.add(() => ran.push(n));
    await Promise.resolve();
    await turn();
    await turn();
    assert.deepEqual(ran, [], 'not in the turn that added them, nor in the turns after it');
    assert.equal(after.pending, 3);
    after.whileWaiting();
    assert.deepEqual(ran, [1, 2, 3]);
    assert.equal(after.pending, 0);
    after.whileWaiting();
    assert.deepEqual(ran, [1, 2, 3], 'a wait with nothing queued runs nothing');
  });

  it('runs tasks after the idle delay when the gateway does not wait', async () => {
    const after = new AfterAnswers(unexpected, 2);
    const ran: string[] = [];
    after.add(() => ran.push('a'));
    after.add(() => ran.push('b'));
    for (let waited = 0; ran.length < 2 && waited < 2000; waited += 5) await sleep(5);
    assert.deepEqual(ran, ['a', 'b']);
    after.add(() => ran.push('c'));
    for (let waited = 0; ran.length < 3 && waited < 2000; waited += 5) await sleep(5);
    assert.deepEqual(ran, ['a', 'b', 'c'], 'a task added after the timer fired arms it again');
  });

  it('reports a task that throws and still runs the others', () => {
    const errors: unknown[] = [];
    const after = new AfterAnswers((err) => errors.push(err), NEVER_MS);
    const ran: string[] = [];
    after.add(() => ran.push('a'));
    after.add(() => {
      throw new Error('observer broke');
    });
    after.add(() => ran.push('c'));
    after.whileWaiting();
    assert.deepEqual(ran, ['a', 'c']);
    assert.deepEqual(
      errors.map((e) => (e as Error).message),
      ['observer broke'],
    );
  });

  it('flush runs what is queued at once, and the armed timer finds nothing left', async () => {
    const after = new AfterAnswers(unexpected, 2);
    let runs = 0;
    after.add(() => runs++);
    after.flush();
    assert.equal(runs, 1);
    await sleep(20);
    assert.equal(runs, 1);
  });

  it('a task added while the queue runs waits for the next run', () => {
    const after = new AfterAnswers(unexpected, NEVER_MS);
    const ran: string[] = [];
    after.add(() => {
      ran.push('first');
      after.add(() => ran.push('added by the first'));
    });
    after.whileWaiting();
    assert.deepEqual(ran, ['first']);
    assert.equal(after.pending, 1);
    after.whileWaiting();
    assert.deepEqual(ran, ['first', 'added by the first']);
  });
});
