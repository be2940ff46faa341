import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ensureTestModels, ROOT } from '../helpers/models.js';

/**
 * The real server process starting with the OIP data port: a readiness probe polling the main
 * port from the moment it opens (as a load balancer's would) must not find the server ready
 * before every model has loaded and the data port listens. The main port opens first, so that
 * MCP clients are answered while models load; the data port's threads start after it.
 */

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
    probe.once('error', reject);
  });
}

/** The status of a GET, or undefined while nothing listens there. */
async function statusOf(url: string): Promise<number | undefined> {
  try {
    const res = await fetch(url);
    await res.arrayBuffer();
    return res.status;
  } catch {
    return undefined;
  }
}

describe('starting the server', { timeout: 120_000 }, () => {
  it('is not ready until every model has loaded and the data port listens', async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-startup-'));
    const models = ['mlp', 'adder'];
    for (const name of models) cpSync(join(ensureTestModels(), name), join(work, 'models', name), { recursive: true });
    const [port, dataPort] = [await freePort(), await freePort()];
    const child = spawn(
      process.execPath,
      [
        join(ROOT, 'bin', 'tensorgate.js'),
        '--models',
        join(work, 'models'),
        '--registry',
        join(work, 'r.db'),
        'serve',
        '--http',
        String(port),
        '--oip-port',
        String(dataPort),
        '--oip-threads',
        '2',
      ],
      { stdio: ['ignore', 'ignore', 'ignore'] },
    );
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    try {
      const base = `http://127.0.0.1:${port}`;
      const answers: number[] = [];
      const deadline = Date.now() + 90_000;
      while (answers.at(-1) !== 200) {
        assert.ok(Date.now() < deadline, `not ready within 90 s; answers so far: ${answers.join(',')}`);
        const status = await statusOf(`${base}/v2/health/ready`);
        if (status !== undefined) answers.push(status);
        else await new Promise((r) => setTimeout(r, 2));
      }
      // The probe saw the port open while the server was starting, then ready.
      assert.ok(answers.length > 1, `answers: ${answers.join(',')}`);
      assert.ok(
        answers.slice(0, -1).every((s) => s === 400),
        `400 until ready: ${answers.join(',')}`,
      );
      // Ready means every model loaded and the data port serving.
      const index = (await (await fetch(`${base}/v2/repository/index`, { method: 'POST' })).json()) as {
        name: string;
        state: string;
      }[];
      assert.deepEqual(index.map((m) => [m.name, m.state]).sort(), models.map((m) => [m, 'READY']).sort());
      assert.equal(await statusOf(`http://127.0.0.1:${dataPort}/v2/health/ready`), 200);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });
});
