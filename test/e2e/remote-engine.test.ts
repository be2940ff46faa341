import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Connected, connect } from '../helpers/mcp.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * The remote engine with real parts: a tensorgate server ("the backend") serves adder and
 * multi_out over OIP v2; a second tensorgate ("the front"), reached by the official MCP client,
 * serves them as remote models through its scheduler. A stand-in endpoint in this process answers
 * garbage or nothing, and one URL points at a closed port.
 */

let backend: Served;
let front: Connected;
let junk: Server;
let junkMode: 'garbage' | 'short' | 'slow' | 'refuse' = 'garbage';
let closedPort: number;

const f32 = (name: string, shape = [-1, -1]) => ({ name, dtype: 'float32', shape });

function remoteModel(dir: string, name: string, remote: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  mkdirSync(join(dir, name));
  writeFileSync(
    join(dir, name, 'config.json'),
    JSON.stringify({
      name,
      engine: 'remote',
      inputs: [f32('a'), f32('b')],
      outputs: [f32('sum')],
      versions: { '1': { format: 'remote' } },
      remote: { retries: 1, backoff_ms: 10, ...remote },
      ...extra,
    }),
  );
}

/** An endpoint whose metadata and readiness are right and whose infer answers are not. */
function startJunk(): Promise<Server> {
  const server = createServer((req, res) => {
    req.resume();
    if (req.method === 'GET' && req.url?.endsWith('/ready')) return void res.writeHead(200).end();
    if (req.method === 'GET')
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          name: 'junk',
          inputs: [
            { name: 'a', datatype: 'FP32', shape: [-1, -1] },
            { name: 'b', datatype: 'FP32', shape: [-1, -1] },
          ],
          outputs: [{ name: 'sum', datatype: 'FP32', shape: [-1, -1] }],
        }),
      );
    if (junkMode === 'garbage') return void res.writeHead(200).end('<html>surprise</html>');
    if (junkMode === 'short') {
      // The header promises 8 bytes of binary output; none follow.
      const header = JSON.stringify({
        outputs: [{ name: 'sum', datatype: 'FP32', shape: [1, 2], parameters: { binary_data_size: 8 } }],
      });
      return void res.writeHead(200, { 'inference-header-content-length': String(header.length) }).end(header);
    }
    if (junkMode === 'refuse') return void res.writeHead(400).end(JSON.stringify({ error: 'BAD_TENSOR: no thanks' }));
    // slow: never answers within the remote timeout.
    setTimeout(() => res.writeHead(200).end('{}'), 3000);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

before(async () => {
  backend = await serveOne(['adder', 'multi_out']);
  await backend.waitForRecord((r) => r.msg.startsWith('ready:'), 'the backend models loaded');
  junk = await startJunk();
  const probe = createServer();
  closedPort = await new Promise<number>((resolve) =>
    probe.listen(0, '127.0.0.1', () => resolve((probe.address() as AddressInfo).port)),
  );
  probe.close();

  const repo = mkdtempSync(join(tmpdir(), 'tg-remote-'));
  remoteModel(
    repo,
    'remote-adder',
    { url: backend.base, model: 'adder' },
    {
      // A fixed 20 ms window, so that concurrent calls certainly meet in one forward pass.
      batching: { max_batch_size: 16, max_queue_delay_us: 20_000, adaptive_delay: false },
      resources: { instances: 1 },
    },
  );
  // JSON lists, a pinned remote version, a trailing slash on the URL.
  remoteModel(
    repo,
    'remote-scores',
    { url: `${backend.base}/`, model: 'multi_out', binary: false },
    {
      inputs: [f32('x', [-1, 4])],
      outputs: [
        { name: 'scores', dtype: 'float32', shape: [-1, 4], labels: ['a', 'b', 'c', 'd'] },
        { name: 'argmax', dtype: 'int64', shape: [-1] },
      ],
      versions: { '1': { format: 'remote', version: '1' } },
    },
  );
  // Declares int64 where the backend's adder takes FP32.
  remoteModel(
    repo,
    'mismatch',
    { url: backend.base, model: 'adder' },
    { inputs: [{ name: 'a', dtype: 'int64', shape: [-1, -1] }, f32('b')] },
  );
  remoteModel(repo, 'down', { url: `http://127.0.0.1:${closedPort}` });
  remoteModel(repo, 'junk', { url: `http://127.0.0.1:${(junk.address() as AddressInfo).port}`, timeout_ms: 300 });
  front = await connect('http', 120_000, [], repo);
});

after(async () => {
  await front?.close();
  await backend?.stop();
  junk?.close();
});

async function call<T>(name: string, args: Record<string, unknown>): Promise<T> {
  const result = await front.client.callTool({ name, arguments: args });
  if (result.isError) throw new Error((result.content as { text: string }[])[0]?.text);
  return result.structuredContent as T;
}

async function callError(name: string, args: Record<string, unknown>): Promise<string> {
  const result = await front.client.callTool({ name, arguments: args });
  assert.equal(result.isError, true, `${name} should fail`);
  return (result.content as { text: string }[])[0]?.text as string;
}

interface Described {
  engine: string;
  remote?: { url: string; model: string };
  versions: { state: string; device?: string; error?: string }[];
}
interface Inferred {
  batch_size: number;
  outputs: { name: string; summary: { values?: unknown; top?: { top: { label: string }[] }[] } }[];
}

describe('remote engine', () => {
  it('describes where a remote model runs', async () => {
    const d = await call<Described>('describe_model', { model: 'remote-adder' });
    assert.equal(d.engine, 'remote');
    assert.deepEqual(d.remote, { url: backend.base, model: 'adder' });
    assert.deepEqual(
      d.versions.map((v) => [v.state, v.device]),
      [['ready', `remote:${backend.base}`]],
    );
  });

  it('answers as the backend does, through batching, over binary and JSON', async () => {
    const a = [[1, 2, 3]];
    const b = [[10, 20, 30]];
    const remote = await call<Inferred>('infer', { model: 'remote-adder', inputs: { a, b } });
    assert.deepEqual(remote.outputs[0]?.summary.values, [[11, 22, 33]]);
    const direct = (await (
      await fetch(`${backend.base}/v2/models/adder/infer`, {
        method: 'POST',
        body: JSON.stringify({
          inputs: [
            { name: 'a', shape: [1, 3], datatype: 'FP32', data: [1, 2, 3] },
            { name: 'b', shape: [1, 3], datatype: 'FP32', data: [10, 20, 30] },
          ],
        }),
      })
    ).json()) as { outputs: { data: number[] }[] };
    assert.deepEqual(direct.outputs[0]?.data, [11, 22, 33]);

    // Concurrent calls share forward passes on the front, as for a local model.
    const many = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        call<Inferred>('infer', { model: 'remote-adder', inputs: { a: [[i, i]], b: [[1, 1]] } }),
      ),
    );
    for (const [i, r] of many.entries()) assert.deepEqual(r.outputs[0]?.summary.values, [[i + 1, i + 1]]);
    assert.ok(Math.max(...many.map((r) => r.batch_size)) > 1, 'some calls were batched');

    // JSON lists, a pinned remote version, int64 outputs and local labels.
    const scores = await call<Inferred>('infer', { model: 'remote-scores', inputs: { x: [[0, 0, 0, 9]] } });
    assert.deepEqual(scores.outputs.find((o) => o.name === 'argmax')?.summary.values, [3]);
    assert.equal(scores.outputs.find((o) => o.name === 'scores')?.summary.top?.[0]?.top[0]?.label, 'd');
  });

  it('refuses to serve a remote whose metadata disagrees with the config, saying how', async () => {
    const d = await call<Described>('describe_model', { model: 'mismatch' });
    assert.equal(d.versions[0]?.state, 'failed');
    assert.match(d.versions[0]?.error as string, /REMOTE_MISMATCH|input "a" is FP32 remotely, INT64 here/);
    assert.match(
      await callError('infer', { model: 'mismatch', inputs: { a: [[1]], b: [[1]] } }),
      /input "a" is FP32 remotely/,
    );
  });

  it('fails fast with REMOTE_UNAVAILABLE when the endpoint is down, and keeps serving the others', async () => {
    const d = await call<Described>('describe_model', { model: 'down' });
    assert.equal(d.versions[0]?.state, 'failed');
    assert.match(d.versions[0]?.error as string, /is unreachable/);
    const t = performance.now();
    assert.match(await callError('infer', { model: 'down', inputs: { a: [[1]], b: [[1]] } }), /unreachable/);
    assert.ok(performance.now() - t < 5000);
    await call('infer', { model: 'remote-adder', inputs: { a: [[1]], b: [[1]] } });
  });

  it('answers garbage, short bodies, refusals and silence with clear errors, never a hang', async () => {
    const args = { model: 'junk', inputs: { a: [[1, 2]], b: [[3, 4]] } };
    junkMode = 'garbage';
    assert.match(
      await callError('infer', args),
      /^REMOTE_ERROR: .*answered infer with something that is not JSON: "<html>surprise/,
    );
    junkMode = 'short';
    assert.match(
      await callError('infer', args),
      /^REMOTE_ERROR: .*output "sum" claims 8 binary bytes; the body has 0 left/,
    );
    junkMode = 'refuse';
    assert.match(await callError('infer', args), /^REMOTE_ERROR: infer at .* answered HTTP 400: BAD_TENSOR: no thanks/);
    junkMode = 'slow';
    const t = performance.now();
    assert.match(await callError('infer', args), /^REMOTE_UNAVAILABLE: .*did not answer within 300 ms/);
    const took = performance.now() - t;
    assert.ok(took >= 600 && took < 2500, `two attempts of 300 ms and a backoff: ${took} ms`);
  });

  it('answers REMOTE_UNAVAILABLE for calls while the backend is gone, after retries', async () => {
    await backend.stop();
    assert.match(
      await callError('infer', { model: 'remote-adder', inputs: { a: [[1]], b: [[1]] } }),
      /^REMOTE_UNAVAILABLE: .* is unreachable/,
    );
    // The front itself is fine.
    assert.ok((await call<{ models: unknown[] }>('list_models', {})).models.length >= 5);
  });
});
