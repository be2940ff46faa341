import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { RunFileHandle, SLOT_STATES } from '../../src/training/run-file.js';
import { PYTHON, ROOT } from '../helpers/models.js';

/**
 * Torn reads are impossible in both directions of the run file: the gateway hammering the control
 * block while the trainer's reader checks every snapshot, and the trainer hammering its slot and
 * the metrics ring while the gateway's reader checks every slot and entry. Real writers, real
 * readers, two processes on one shared-memory file.
 */

const env = { ...process.env, PYTHONPATH: join(ROOT, 'python') };
const SECONDS = 2;

function makeRunFile(): string {
  const path = join(mkdtempSync(join(tmpdir(), 'tg-seqlock-')), 'hammer.tgrun');
  execFileSync(
    PYTHON,
    ['-c', 'import sys; from tensorgate._runfile import RunFile; RunFile.create(sys.argv[1], {}, [0.0] * 32)', path],
    { env },
  );
  return path;
}

function python(script: string, path: string) {
  const child = spawn(PYTHON, [join(ROOT, 'test/fixtures', script), path, String(SECONDS)], { env });
  let out = '';
  child.stdout.on('data', (c) => {
    out += c;
  });
  let running = true;
  const done = new Promise<string>((resolve, reject) =>
    child.once('exit', (code) => {
      running = false;
      if (code === 0) resolve(out);
      else reject(new Error(`${script} exited with ${code}`));
    }),
  );
  return { done, running: () => running };
}

describe('run file seqlocks', () => {
  it('the trainer never reads a torn control block while the gateway writes it', async () => {
    const path = makeRunFile();
    const handle = RunFileHandle.open(path);
    const reader = python('control_reader.py', path);
    let version = 0;
    while (reader.running()) {
      for (let i = 0; i < 200; i++) {
        version++;
        handle.writeControl({
          version,
          applyAtStep: version,
          paused: version % 2 === 1,
          stop: false,
          checkpointSeq: version,
          values: new Array(32).fill(version),
        });
      }
      await new Promise((r) => setImmediate(r));
    }
    const result = JSON.parse(await reader.done) as { reads: number; versions: number; torn: number; busy: number };
    handle.close();
    assert.equal(result.torn, 0, JSON.stringify(result));
    assert.ok(result.versions > 100, `the reader saw the writes happen: ${JSON.stringify(result)} of ${version}`);
  });

  it('the gateway never reads a torn slot or ring entry while the trainer writes them', async () => {
    const path = makeRunFile();
    const handle = RunFileHandle.open(path);
    const writer = python('slot_writer.py', path);
    let slots = 0;
    let entries = 0;
    let cursor = 0;
    let lost = 0;
    const seen = new Set<number>();
    while (writer.running()) {
      const slot = handle.readSlot(0);
      if (slot) {
        slots++;
        seen.add(slot.seenVersion);
        const n = slot.seenVersion;
        assert.deepEqual(
          [slot.appliedVersion, slot.appliedStep, slot.checkpointDone, slot.checkpointStep, slot.startTime],
          [n, n, n, n, n],
          'slot fields from one write',
        );
        assert.equal(slot.pid, n % 4);
        assert.equal(SLOT_STATES.indexOf(slot.state), n % 4);
      }
      const batch = handle.readMetrics(cursor);
      cursor = batch.cursor;
      lost += batch.lost;
      for (const e of batch.entries) {
        entries++;
        assert.equal(e.value, 2 * e.step, 'ring entry from one write');
        assert.equal(e.metric, e.step % 4);
      }
      await new Promise((r) => setImmediate(r));
    }
    await writer.done;
    handle.close();
    assert.ok(seen.size > 50, `the gateway saw the slot change ${seen.size} times`);
    assert.ok(entries > 1000, `read ${entries} entries (${lost} overwritten before reading, ${slots} slot reads)`);
  });
});
