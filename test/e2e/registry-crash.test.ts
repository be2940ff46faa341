import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import { ensureTestModels, ROOT } from '../helpers/models.js';

/**
 * Registry crash safety: `tensorgate register` is SIGKILLed at points spread over its whole run
 * (start-up, the registry write, loading, warm-up), alternating between two configs of one model.
 * After every kill the registry must be intact and hold the model either as one attempt wrote it,
 * with exactly that attempt's versions, or not at all; the killed process must leave no worker
 * behind, and the next registration must succeed.
 */

const run = promisify(execFile);
const CLI = join(ROOT, 'bin', 'tensorgate.js');
const KILLS = 12;

interface StoredModel {
  name: string;
  config: { description: string; versions: Record<string, unknown> };
  versions: { version: string; status: string }[];
}

describe('registry crash safety', { timeout: 240_000 }, () => {
  let work: string;
  let modelDir: string;
  let registryPath: string;
  let global: string[];

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'tg-regcrash-'));
    modelDir = join(work, 'crashy');
    cpSync(join(ensureTestModels(), 'tabular-classifier'), modelDir, { recursive: true });
    cpSync(join(modelDir, '1'), join(modelDir, '2'), { recursive: true });
    registryPath = join(work, 'r.db');
    global = ['--registry', registryPath, '--models', join(work, 'empty'), '--allow-root', work];
  });

  /** Attempt i registers "crashy" described as `attempt i`, with versions 1 (even i) or 1 and 2 (odd i). */
  const writeAttempt = (i: number) => {
    const path = join(modelDir, 'config.json');
    const config = JSON.parse(readFileSync(path, 'utf8'));
    const v1 = config.versions['1'];
    config.name = 'crashy';
    config.description = `attempt ${i}`;
    config.versions = i % 2 === 0 ? { '1': v1 } : { '1': v1, '2': v1 };
    writeFileSync(path, JSON.stringify(config));
  };

  const storedModels = async (): Promise<StoredModel[]> =>
    JSON.parse((await run(process.execPath, [CLI, ...global, 'models', '--json'], { cwd: ROOT })).stdout);

  const workersOf = (pid: number) =>
    readdirSync('/proc')
      .filter((e) => /^\d+$/.test(e))
      .filter((e) => {
        try {
          return readFileSync(`/proc/${e}/cmdline`, 'utf8').includes(`tensorgate-${pid}-`);
        } catch {
          return false;
        }
      });

  it('keeps the registry consistent whenever register is killed, and registers cleanly after', async () => {
    // How long one registration takes uninterrupted, to spread the kills over it.
    writeAttempt(-1);
    const t0 = performance.now();
    await run(process.execPath, [CLI, ...global, 'register', modelDir], { cwd: ROOT });
    const fullMs = performance.now() - t0;
    const outcomes = { written: 0, previous: 0 };
    const killed: number[] = [];

    for (let i = 0; i < KILLS; i++) {
      writeAttempt(i);
      const child = spawn(process.execPath, [CLI, ...global, 'register', modelDir], { cwd: ROOT, stdio: 'ignore' });
      const exited = new Promise((resolve) => child.once('exit', resolve));
      await sleep((fullMs * i) / KILLS);
      child.kill('SIGKILL');
      await exited;
      const pid = child.pid as number;
      killed.push(pid);

      const db = new Database(registryPath, { readonly: true });
      assert.equal(db.pragma('integrity_check', { simple: true }), 'ok', `kill ${i}: integrity`);
      db.close();
      const [crashy, ...others] = await storedModels();
      assert.equal(others.length, 0);
      assert.ok(crashy, `kill ${i}: the model registered before is still there`);
      const attempt = Number(/^attempt (-?\d+)$/.exec(crashy.config.description)?.[1]);
      assert.ok(attempt === i || attempt < i, `kill ${i}: stored config is from attempt ${attempt}`);
      outcomes[attempt === i ? 'written' : 'previous'] += 1;
      assert.deepEqual(
        crashy.versions.map((v) => v.version).sort(),
        Object.keys(crashy.config.versions).sort(),
        `kill ${i}: the versions are exactly those of the stored config (attempt ${attempt})`,
      );
      for (const v of crashy.versions) assert.match(v.status, /^(registered|ready|failed)$/);

      // Workers see their pipe close and exit; none outlives the killed registration for long.
      for (let wait = 0; workersOf(pid).length > 0 && wait < 50; wait++) await sleep(100);
      assert.deepEqual(workersOf(pid), [], `kill ${i}: workers of the killed process exited`);
    }
    assert.ok(
      outcomes.previous > 0 && outcomes.written > 0,
      `kills landed before and after the write: ${JSON.stringify(outcomes)}`,
    );

    // The next registration succeeds and sweeps the arenas the killed processes left in /dev/shm.
    writeAttempt(KILLS + 1);
    const { stdout } = await run(process.execPath, [CLI, ...global, 'register', modelDir], { cwd: ROOT });
    assert.match(stdout, /^crashy@1: ready/m);
    assert.match(stdout, /^crashy@2: ready/m);
    const [crashy] = await storedModels();
    assert.equal(crashy?.config.description, `attempt ${KILLS + 1}`);
    assert.deepEqual(
      crashy?.versions.map((v) => v.status),
      ['ready', 'ready'],
    );
    const left = readdirSync('/dev/shm').filter((f) => killed.some((pid) => f.startsWith(`tensorgate-${pid}-`)));
    assert.deepEqual(left, [], 'no arena of a killed registration is left in /dev/shm');
  });
});
