import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { AnswerSpin, EventLoopSpin } from '../../../src/engines/torch/loop-spin.js';

/** Resolves after `n` turns of the event loop. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

describe('EventLoopSpin', () => {
  it('keeps the loop turning while held, timers and I/O still running, and stops at the release', async () => {
    const spin = new EventLoopSpin();
    const release = spin.hold(60_000);
    assert.equal(spin.spinning, true);
    // A timer fires while the loop is held: holding polls, it does not block.
    await sleep(5);
    assert.ok(spin.turns > 0, 'the loop turned while held');
    release();
    release(); // twice releases once
    await turns(3);
    assert.equal(spin.spinning, false);
    const after = spin.turns;
    await turns(5);
    assert.equal(spin.turns, after, 'no turn is taken once released');
  });

  it('stops at the deadline although a hold is still open, and starts again at the next hold', async () => {
    let now = 0;
    const spin = new EventLoopSpin(() => now);
    const forgotten = spin.hold(1);
    await turns(3);
    assert.equal(spin.spinning, true);
    now = 2; // past the deadline
    await turns(3);
    assert.equal(spin.spinning, false);
    const release = spin.hold(1);
    assert.equal(spin.spinning, true, 'a new hold turns the loop again');
    release();
    forgotten();
    await turns(3);
    assert.equal(spin.spinning, false);
  });

  it('lasts until the last of several holds is released', async () => {
    const spin = new EventLoopSpin();
    const first = spin.hold(60_000);
    const second = spin.hold(60_000);
    first();
    await turns(3);
    assert.equal(spin.spinning, true, 'one hold is still open');
    second();
    await turns(3);
    assert.equal(spin.spinning, false);
  });
});

describe('AnswerSpin', () => {
  it('holds the loop for a wait only when the previous answer came within the spin', async () => {
    let now = 0;
    const loop = new EventLoopSpin(() => now);
    const answers = new AnswerSpin(1, loop, () => now);
    // The first wait spins: nothing says yet that answers are slow.
    let answered = answers.begin();
    assert.equal(loop.spinning, true);
    now += 5; // a slow answer: 5 ms against a 1 ms spin
    answered();
    await turns(3);
    assert.equal(loop.spinning, false);
    // After a slow answer the next wait sleeps...
    answered = answers.begin();
    assert.equal(loop.spinning, false, 'no spin after an answer slower than the spin');
    now += 0.5;
    answered();
    // ...and after a fast one it spins again.
    answered = answers.begin();
    assert.equal(loop.spinning, true, 'a spin again after an answer within the spin');
    answered();
    await turns(3);
    assert.equal(loop.spinning, false);
  });

  it('never holds the loop for a worker that does not spin', () => {
    const loop = new EventLoopSpin();
    const answered = new AnswerSpin(0, loop).begin();
    assert.equal(loop.spinning, false);
    answered();
  });
});
