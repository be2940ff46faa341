import assert from 'node:assert/strict';
import { mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { AuditLog } from '../../../src/audit/audit-log.js';
import { TrainingControl } from '../../../src/training/training-control.js';

/**
 * The control plane's pace on a real directory with real inotify events: quick while a file may
 * still become a run, idle (waiting on the directory) otherwise, woken by a change to it.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function counted(control: TrainingControl): { ticks: number } {
  const count = { ticks: 0 };
  const tick = control.tick.bind(control);
  control.tick = () => {
    count.ticks++;
    tick();
  };
  return count;
}

describe('training control pace', () => {
  it('sleeps with no live run, wakes on a change to the directory, and polls while a file is young', async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-control-pace-'));
    const runsDir = join(work, 'runs');
    const control = new TrainingControl({
      runsDir,
      audit: new AuditLog(join(work, 'audit.jsonl')),
      pollMs: 20,
      idlePollMs: 600_000,
    });
    const count = counted(control);
    control.start();
    try {
      await sleep(300);
      assert.equal(count.ticks, 1, 'one scan at start, then none while idle');

      writeFileSync(join(runsDir, 'notes.txt'), 'not a run');
      await sleep(300);
      const woken = count.ticks;
      assert.ok(woken >= 2, 'a change to the directory wakes a scan');
      await sleep(300);
      assert.equal(count.ticks, woken, 'and it sleeps again');

      // A run file without its header yet: its trainer may still be creating it, so the poll stays
      // quick until it reads or is old enough to be called unreadable.
      const young = join(runsDir, 'starting.tgrun');
      writeFileSync(young, 'half a header');
      await sleep(300);
      const polled = count.ticks;
      assert.ok(polled - woken >= 5, `polled every 20 ms while the file was young (${polled - woken} ticks)`);
      assert.deepEqual(control.listRuns().unreadable, []);

      const old = new Date(Date.now() - 60_000);
      utimesSync(young, old, old);
      await sleep(100);
      assert.deepEqual(
        control.listRuns().unreadable.map((u) => u.file),
        ['starting.tgrun'],
      );
      await sleep(100);
      const settled = count.ticks;
      await sleep(300);
      assert.equal(count.ticks, settled, 'idle again once the file is called unreadable');
    } finally {
      control.close();
    }
  });
});
