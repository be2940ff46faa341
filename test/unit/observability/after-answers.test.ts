import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AfterAnswers } from '../../../src/observability/after-answers.js';

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));
const unexpected = (err: unknown) => assert.fail(`a task threw: ${String(err)}`);

describe('AfterAnswers', () => {
  it('runs tasks after the current turn, in the order they were added', async () => {
    const after = new AfterAnswers(unexpected);
    const ran: number[] = [];
    for (const n of [1, 2, 3]) after.add(() => ran.push(n));
    await Promise.resolve();
    assert.deepEqual(ran, [], 'not in the turn that added them, microtasks included');
    assert.equal(after.pending, 3);
    await turn();
    assert.deepEqual(ran, [1, 2, 3]);
    assert.equal(after.pending, 0);
  });

  it('reports a task that throws and still runs the others', async () => {
    const errors: unknown[] = [];
    const after = new AfterAnswers((err) => errors.push(err));
    const ran: string[] = [];
    after.add(() => ran.push('a'));
    after.add(() => {
      throw new Error('observer broke');
    });
    after.add(() => ran.push('c'));
    await turn();
    assert.deepEqual(ran, ['a', 'c']);
    assert.deepEqual(
      errors.map((e) => (e as Error).message),
      ['observer broke'],
    );
  });

  it('flush runs what is queued at once, and the scheduled turn finds nothing left', async () => {
    const after = new AfterAnswers(unexpected);
    let runs = 0;
    after.add(() => runs++);
    after.flush();
    assert.equal(runs, 1);
    await turn();
    assert.equal(runs, 1);
    after.add(() => runs++);
    await turn();
    assert.equal(runs, 2, 'a task added after a flush is scheduled again');
  });

  it('a task added while the queue runs waits for the next turn', async () => {
    const after = new AfterAnswers(unexpected);
    const ran: string[] = [];
    after.add(() => {
      ran.push('first');
      after.add(() => ran.push('added by the first'));
    });
    await turn();
    assert.deepEqual(ran, ['first']);
    await turn();
    assert.deepEqual(ran, ['first', 'added by the first']);
  });
});
