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
    await turns(5);
    assert.ok(spin.turns > 0, 'the loop turned while held');
    // A timer fires while the loop is held: holding polls, it does not block.
    await sleep(5);
    assert.equal(spin.spinning, true);
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
  /**
   * An AnswerSpin on a clock the test moves (`clock.now`) and a schedule that runs nothing by
   * itself: the test fires what `pending` holds.
   */
  function rig(spinMs: number, wakeEarly: boolean) {
    const clock = { now: 0 };
    const loop = new EventLoopSpin(() => clock.now);
    const pending: { fn: () => void; ms: number; cancelled: boolean }[] = [];
    const schedule = (fn: () => void, ms: number) => {
      const entry = { fn, ms, cancelled: false };
      pending.push(entry);
      return () => {
        entry.cancelled = true;
      };
    };
    const answers = new AnswerSpin(spinMs, { loop, now: () => clock.now, schedule, wakeEarly });
    return { clock, loop, pending, answers };
  }

  it('waits awake from the start for answers that come within the spin', async () => {
    const { clock, loop, pending, answers } = rig(1, true);
    // The first wait is awake: nothing says yet that answers are slow.
    let answered = answers.begin();
    assert.equal(loop.spinning, true);
    clock.now += 0.5;
    answered();
    answered = answers.begin();
    assert.equal(loop.spinning, true, 'awake again after an answer within the spin');
    clock.now += 0.5;
    answered();
    await turns(3);
    assert.equal(loop.spinning, false);
    assert.equal(pending.length, 0, 'no timer for fast answers');
  });

  it('sleeps through most of a slow answer and wakes a spin before it is due', async () => {
    const { clock, loop, pending, answers } = rig(1, true);
    let answered = answers.begin();
    clock.now += 5; // a 5 ms answer against a 1 ms spin
    answered();
    await turns(3);
    answered = answers.begin();
    assert.equal(loop.spinning, false, 'asleep at first');
    assert.deepEqual(
      pending.map((p) => p.ms),
      [4],
      'woken 1 ms (the spin) before the answer is due',
    );
    clock.now += 4;
    pending[0]?.fn();
    assert.equal(loop.spinning, true, 'awake for the end of the wait');
    clock.now += 1;
    answered();
    await turns(3);
    assert.equal(loop.spinning, false, 'asleep again once the answer is in');
  });

  it('cancels the wake-up when a slow model answers early, and learns the shorter wait', async () => {
    const { clock, loop, pending, answers } = rig(1, true);
    let answered = answers.begin();
    clock.now += 5;
    answered();
    await turns(3);
    answered = answers.begin();
    clock.now += 0.5; // early
    answered();
    assert.equal(pending[0]?.cancelled, true);
    assert.equal(loop.spinning, false);
    answered = answers.begin();
    assert.equal(loop.spinning, true, 'the last answer came within the spin: awake from the start');
    answered();
    await turns(3);
  });

  it('without wakeEarly (a model on the CPU) waits for a slow answer asleep throughout', async () => {
    const { clock, loop, pending, answers } = rig(1, false);
    let answered = answers.begin();
    clock.now += 5;
    answered();
    await turns(3);
    answered = answers.begin();
    assert.equal(loop.spinning, false);
    assert.equal(pending.length, 0, 'no wake-up is scheduled');
    clock.now += 5;
    answered();
  });

  it('times a request sent while another was pending from the answer ahead of it, not from its send', async () => {
    const { clock, loop, answers } = rig(1, true);
    const first = answers.begin();
    clock.now += 0.1;
    const second = answers.begin(); // sent ahead, into the worker's pipeline
    clock.now += 0.7;
    first(); // 0.8 ms after its send
    clock.now += 0.8;
    second(); // 1.5 ms after its send, but only 0.8 ms after the answer ahead of it
    await turns(3);
    const third = answers.begin();
    assert.equal(loop.spinning, true, 'the last wait was 0.8 ms, within the spin: awake from the start');
    third();
    await turns(3);
  });

  it('never holds the loop for a worker that does not spin', () => {
    const { loop, pending, answers } = rig(0, true);
    answers.begin()();
    answers.begin()();
    assert.equal(loop.spinning, false);
    assert.equal(pending.length, 0);
  });
});
