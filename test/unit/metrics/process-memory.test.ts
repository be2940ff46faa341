import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ProcessMemory, parseRollup } from '../../../src/metrics/process-memory.js';

// /proc/PID/smaps_rollup of a forked torch worker (Linux 6.x): most of its pages are its fork server's.
const ROLLUP = `55c25f6dd000-7ffe80621000 ---p 00000000 00:00 0                          [rollup]
Rss:              539736 kB
Pss:              201344 kB
Pss_Dirty:         97336 kB
Shared_Clean:     240700 kB
Shared_Dirty:     200000 kB
Private_Clean:      1700 kB
Private_Dirty:     97336 kB
Swap:                  0 kB
`;

/** A directory laid out as /proc is, with one smaps_rollup per pid. */
function fakeProc(rollups: Record<number, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'tg-proc-'));
  for (const [pid, text] of Object.entries(rollups)) {
    mkdirSync(join(root, pid));
    writeFileSync(join(root, pid, 'smaps_rollup'), text);
  }
  return root;
}

describe('ProcessMemory', () => {
  it('parses the proportional and private sizes', () => {
    assert.deepEqual(parseRollup(ROLLUP), { pssBytes: 201344 * 1024, privateBytes: (1700 + 97336) * 1024 });
    assert.deepEqual(parseRollup(''), { pssBytes: 0, privateBytes: 0 });
  });

  it("reads this process's own rollup from /proc, and leaves out a process that is not there", async () => {
    const memory = new ProcessMemory();
    const own = Number(/^Pss:\s+(\d+) kB/m.exec(readFileSync('/proc/self/smaps_rollup', 'latin1'))?.[1]) * 1024;
    const rollups = await memory.rollups([process.pid, 2 ** 22 + 1]);
    assert.deepEqual([...rollups.keys()], [process.pid]);
    const pss = rollups.get(process.pid)?.pssBytes ?? 0;
    // Read moments apart from a live process: the same order of size, not the same bytes.
    assert.ok(pss > own / 2 && pss < own * 2, `${pss} against ${own}`);
  });

  it('answers from a reading younger than its age limit, and reads again after', async () => {
    const root = fakeProc({ 7: ROLLUP });
    const memory = new ProcessMemory(150, root);
    assert.equal((await memory.rollups([7])).get(7)?.pssBytes, 201344 * 1024);
    writeFileSync(join(root, '7', 'smaps_rollup'), ROLLUP.replace('201344', '300000'));
    assert.equal((await memory.rollups([7])).get(7)?.pssBytes, 201344 * 1024, 'the reading is reused');
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal((await memory.rollups([7])).get(7)?.pssBytes, 300000 * 1024, 'read again once stale');
  });

  it('shares one reading among asks that come while it runs, for many pids at once', async () => {
    const pids = Array.from({ length: 12 }, (_, i) => 100 + i);
    const root = fakeProc(Object.fromEntries(pids.map((pid) => [pid, ROLLUP.replace('201344', String(pid))])));
    const memory = new ProcessMemory(60_000, root, 2);
    const [a, b] = await Promise.all([memory.rollups(pids), memory.rollups([...pids].reverse())]);
    for (const pid of pids) {
      assert.equal(a.get(pid)?.pssBytes, pid * 1024);
      assert.equal(b.get(pid)?.pssBytes, pid * 1024);
    }
    // Every pid was read once: a file changed now is not seen (the readings are still young).
    for (const pid of pids) writeFileSync(join(root, String(pid), 'smaps_rollup'), '');
    const again = await memory.rollups(pids);
    assert.equal(again.get(105)?.pssBytes, 105 * 1024);
  });

  it('leaves out a process once it has exited, though its file was kept open', async () => {
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)'], { stdio: 'ignore' });
    await once(child, 'spawn');
    const pid = child.pid as number;
    const memory = new ProcessMemory(0);
    try {
      assert.ok(((await memory.rollups([pid])).get(pid)?.pssBytes ?? 0) > 0);
      child.kill('SIGKILL');
      await once(child, 'exit');
      assert.equal((await memory.rollups([pid])).has(pid), false);
    } finally {
      child.kill('SIGKILL');
      await memory.close();
    }
  });

  it('reads a rollup larger than its buffer whole', async () => {
    const padding = Array.from({ length: 200 }, (_, i) => `Field_${i}:          ${i} kB`).join('\n');
    const root = fakeProc({ 9: `${padding}\n${ROLLUP}` });
    const rollup = (await new ProcessMemory(0, root).rollups([9])).get(9);
    assert.deepEqual(rollup, parseRollup(ROLLUP));
  });
});
