import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { freePort } from '../helpers/ports.js';
import { serveOne } from '../helpers/serve.js';

/**
 * The real server process starting with the OIP data port: a readiness probe polling the main
 * port from the moment it opens (as a load balancer's would) must not find the server ready
 * before every model has loaded and the data port listens. The main port opens first, so that
 * MCP clients are answered while models load; the data port's threads start after it.
 */

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
    const models = ['mlp', 'adder'];
    const [port, dataPort] = [await freePort(), await freePort()];
    const base = `http://127.0.0.1:${port}`;
    // The probe starts before the server does; serveOne resolves once the ports are announced.
    const starting = serveOne(models, { http: port, serveArgs: ['--oip-port', String(dataPort)] });
    const answers: number[] = [];
    const deadline = Date.now() + 90_000;
    while (answers.at(-1) !== 200) {
      assert.ok(Date.now() < deadline, `not ready within 90 s; answers so far: ${answers.join(',')}`);
      const status = await statusOf(`${base}/v2/health/ready`);
      if (status !== undefined) answers.push(status);
      else await new Promise((r) => setTimeout(r, 2));
    }
    const served = await starting;
    try {
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
      await served.stop();
    }
  });
});
