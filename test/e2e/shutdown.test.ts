import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { openGateway } from '../helpers/gateway.js';
import { waitForUrl } from '../helpers/mcp.js';
import { ensureTestModels, ROOT } from '../helpers/models.js';
import { serveOne } from '../helpers/serve.js';

/** The real server process stopped with SIGTERM (clean) and SIGKILL (not clean). */

const arenasOf = (pid: number) => readdirSync('/dev/shm').filter((n) => n.startsWith(`tensorgate-${pid}-`));

async function startServer() {
  const work = mkdtempSync(join(tmpdir(), 'tg-shutdown-'));
  cpSync(join(ensureTestModels(), 'sleepy'), join(work, 'models', 'sleepy'), { recursive: true });
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
      '0',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const url = await waitForUrl(child);
  const client = new Client({ name: 'shutdown-test', version: '0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, client, exited, pid: child.pid as number };
}

describe('stopping the server', { timeout: 120_000 }, () => {
  it('on SIGTERM answers the request in flight, then exits 0 leaving no shared memory', async () => {
    const { child, client, exited, pid } = await startServer();
    const ready = async () => {
      const listed = await client.callTool({ name: 'list_models', arguments: {} });
      const models = (listed.structuredContent as { models: { versions: { state: string }[] }[] }).models;
      return models[0]?.versions[0]?.state === 'ready';
    };
    while (!(await ready())) await new Promise((r) => setTimeout(r, 100));
    const call = client.callTool({ name: 'infer', arguments: { model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } } });
    await new Promise((r) => setTimeout(r, 150)); // computing now (0.5 s)
    child.kill('SIGTERM');
    const result = (await call) as { isError?: boolean; structuredContent?: { outputs: { shape: number[] }[] } };
    assert.notEqual(result.isError, true, JSON.stringify(result));
    assert.deepEqual(result.structuredContent?.outputs[0]?.shape, [1, 4]);
    assert.equal(await exited, 0);
    assert.deepEqual(arenasOf(pid), []);
  });

  it('on SIGTERM while its models load exits 0 without errors logged or a ready line', async () => {
    // serveOne returns as the server announces its ports and begins loading: the fork server is
    // still importing torch then, so every model is stopped before it is ready.
    const served = await serveOne(['mlp', 'sleepy']);
    assert.equal(await served.stop(), 0);
    const records = served.records();
    assert.deepEqual(
      records.filter((r) => r.level === 'error' || r.level === 'warn'),
      [],
      'stopping a load is not a failure',
    );
    assert.ok(!records.some((r) => r.msg.startsWith('ready:')), served.stderr());
    const unloaded = records.filter((r) => r.code === 'SHUTTING_DOWN').map((r) => r.msg);
    assert.deepEqual(unloaded.sort(), ['mlp@1 was unloaded while it loaded', 'sleepy@1 was unloaded while it loaded']);
    assert.deepEqual(arenasOf(served.child.pid as number), []);
  });

  it('on SIGTERM under load answers every request or refuses its connection, resetting none, on both ports', async () => {
    const served = await serveOne('mlp', { serveArgs: ['--oip-port', '0'] });
    const dataPort = /OIP v2 data plane at (http:\/\/[\d.]+:\d+)\/v2/.exec(served.stderr())?.[1];
    assert.ok(dataPort, served.stderr());
    await served.waitForRecord((r) => r.msg.startsWith('ready:'), 'ready');
    const body = JSON.stringify({ inputs: [{ name: 'x', shape: [1, 4], datatype: 'FP32', data: [1, 2, 3, 4] }] });
    /** One infer: its status (with `c` when the answer closed the connection), or the socket error's code. */
    const infer = (base: string, agent: Agent) =>
      new Promise<string>((resolve) => {
        const url = new URL('/v2/models/mlp/infer', base);
        const req = request(
          url,
          { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': body.length } },
          (res) => {
            res.resume();
            res.on('end', () => resolve(`${res.statusCode}${res.headers.connection === 'close' ? 'c' : ''}`));
          },
        );
        req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
        req.end(body);
      });
    // Eight kept-alive clients per port, each sending until it is told no (a non-200 answer, or
    // its connection refused), for at most 20 s.
    const deadline = Date.now() + 20_000;
    const clients = [served.base, dataPort].flatMap((base) =>
      Array.from({ length: 8 }, async () => {
        const agent = new Agent({ keepAlive: true, maxSockets: 1 });
        const outcomes: string[] = [];
        while (Date.now() < deadline) {
          const outcome = await infer(base, agent);
          outcomes.push(outcome);
          if (outcome !== '200') break;
        }
        agent.destroy();
        return outcomes;
      }),
    );
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(await served.stop(), 0);
    for (const outcomes of await Promise.all(clients)) {
      assert.ok(outcomes.filter((o) => o === '200').length > 0, outcomes.slice(-3).join(' '));
      // The last: SHUTTING_DOWN with the connection closed, a 200 closing it (answered while
      // stopping), or a refused connection after either.
      const last = outcomes.at(-1) as string;
      assert.ok(['503c', '200c', 'ECONNREFUSED'].includes(last), `ended with ${outcomes.slice(-3).join(' ')}`);
    }
  });

  it("after SIGKILL, the next server removes the dead one's shared memory at start", async () => {
    const { child, exited, pid } = await startServer();
    while (arenasOf(pid).length === 0) await new Promise((r) => setTimeout(r, 50));
    child.kill('SIGKILL');
    await exited;
    assert.ok(arenasOf(pid).length > 0, 'a killed server cannot clean up');
    const work = mkdtempSync(join(tmpdir(), 'tg-sweep-'));
    const next = await openGateway(work);
    assert.deepEqual(arenasOf(pid), []);
    await next.close();
    assert.ok(existsSync('/dev/shm'));
  });
});
