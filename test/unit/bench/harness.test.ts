import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { closedLoop } from '../../../bench/peers/harness.js';

/**
 * Servers a benchmark starts live in process groups of their own; a benchmark stopped by a signal
 * (CI's timeout, Ctrl-C) must not leave them running, holding ports and cores.
 */

const CHILD = join(import.meta.dirname, '..', '..', 'fixtures', 'bench-harness-child.ts');

/** True while the pid names a process that is not a zombie. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

describe('bench harness', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`stops the servers it started when the benchmark gets ${signal}`, async () => {
      const bench = spawn(process.execPath, ['--import', 'tsx', CHILD], { stdio: ['ignore', 'pipe', 'inherit'] });
      const server = await new Promise<number>((resolve, reject) => {
        let seen = '';
        bench.stdout.on('data', (chunk: Buffer) => {
          seen += chunk.toString();
          const match = /server (\d+)/.exec(seen);
          if (match) resolve(Number(match[1]));
        });
        bench.once('exit', (code) => reject(new Error(`the benchmark exited with ${code} before its server ran`)));
      });
      assert.ok(alive(server), 'the server runs');
      const exited = new Promise<number | null>((resolve) => bench.once('exit', (code) => resolve(code)));
      bench.kill(signal);
      assert.equal(await exited, signal === 'SIGTERM' ? 143 : 130, 'exits as killed by the signal');
      const deadline = Date.now() + 5000;
      while (alive(server) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(alive(server), false, 'the server was stopped with it');
    });
  }
});

describe('closedLoop', () => {
  it('measures every call that finishes in its window', async () => {
    let calls = 0;
    const fast = async () => async () => {
      calls++;
      await new Promise((r) => setTimeout(r, 5));
    };
    const measured = await closedLoop(fast, 2, 200, 20);
    assert.ok(measured.latency.n > 4 && measured.latency.n <= calls, JSON.stringify(measured.latency));
    assert.ok(measured.throughput > 0);
  });

  it('waits past a window shorter than one call until a call has finished', async () => {
    const slow = async () => async () => {
      await new Promise((r) => setTimeout(r, 300));
    };
    const measured = await closedLoop(slow, 1, 50, 10);
    assert.equal(measured.latency.n, 1);
    assert.ok((measured.latency.p50 ?? 0) >= 250, JSON.stringify(measured.latency));
  });

  it('fails the block when a call fails, also while it waits for a first call', async () => {
    const failing = async () => async () => {
      await new Promise((r) => setTimeout(r, 100));
      throw new Error('refused');
    };
    await assert.rejects(closedLoop(failing, 1, 20, 10), /refused/);
  });
});
