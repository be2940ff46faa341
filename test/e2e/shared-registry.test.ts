import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import pg from 'pg';
import { ensureTestModels, ROOT } from '../helpers/models.js';
import { type Postgres, startPostgres } from '../helpers/postgres.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * Two tensorgate replicas on one shared registry in a real PostgreSQL server (Debian's, on
 * loopback): registration through one is served by the other, tensor:// handles and sessions
 * behave as docs/deploy.md says, MCP works through a round-robin proxy, a lost database leaves
 * loaded models serving and registrations resume once it is back, and concurrent registrations
 * of one name from both replicas end with one consistent registry.
 */

const run = promisify(execFile);
const PASSWORD = 'pw-must-not-leak';

let db: Postgres;
let a: Served;
let b: Served;

async function post(base: string, path: string, body?: unknown) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? '' : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json().catch(() => ({}))) as Record<string, unknown> };
}

async function waitReady(base: string, model: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await fetch(`${base}/v2/models/${model}/ready`)).status !== 200) {
    if (Date.now() > deadline) throw new Error(`${model} not ready at ${base} within ${timeoutMs} ms`);
    await sleep(100);
  }
}

const addInputs = (x: number) => ({
  inputs: [
    { name: 'a', datatype: 'FP32', shape: [1, 2], data: [x, 1] },
    { name: 'b', datatype: 'FP32', shape: [1, 2], data: [10, 20] },
  ],
});

function summaryValues(result: { structuredContent?: unknown }): unknown {
  return (result.structuredContent as { outputs: { summary: { values?: unknown } }[] }).outputs[0]?.summary.values;
}

async function mcpClient(url: string): Promise<Client> {
  const client = new Client({ name: 'shared-registry-test', version: '0.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

/** A copy of the adder test model under another name and description. */
function adderCopy(dir: string, name: string, description: string): void {
  cpSync(join(ensureTestModels(), 'adder'), dir, { recursive: true });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, name, description }));
}

/** Sends each request to the next backend in turn, as a round-robin load balancer does. */
function roundRobin(backends: string[]): Promise<{ server: Server; url: string; sent: number[] }> {
  const sent = backends.map(() => 0);
  let next = 0;
  const server = createServer((req, res) => {
    const i = next++ % backends.length;
    sent[i] = (sent[i] ?? 0) + 1;
    const target = new URL(req.url ?? '/', backends[i]);
    const upstream = request(target, { method: req.method, headers: { ...req.headers, host: target.host } }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    upstream.on('error', () => res.writeHead(502).end());
    req.pipe(upstream);
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, sent }),
    ),
  );
}

describe('replicas on a shared PostgreSQL registry', { timeout: 300_000 }, () => {
  before(async () => {
    db = await startPostgres(PASSWORD);
    const shared = (replica: string) => ({ globalArgs: ['--registry', db.url, '--replica-id', replica] });
    a = await serveOne('adder', shared('replica-a'));
    await waitReady(a.base, 'adder');
    // b's repository is empty: everything it serves, it learns from the registry.
    b = await serveOne([], shared('replica-b'));
  });

  after(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
    await db?.destroy();
  });

  it('a model registered through one replica is served by the other', async () => {
    await waitReady(b.base, 'adder');
    const fromB = await post(b.base, '/v2/models/adder/infer', addInputs(1));
    assert.equal(fromB.status, 200, JSON.stringify(fromB.body));
    assert.deepEqual((fromB.body.outputs as { data: number[] }[])[0]?.data, [11, 21]);

    // Registered through a's OIP repository API after both started: b hears of it and loads it.
    adderCopy(join(a.work, 'models', 'late'), 'late', 'registered after start');
    const load = await post(a.base, '/v2/repository/models/late/load');
    assert.equal(load.status, 200, JSON.stringify(load.body));
    await waitReady(b.base, 'late', 30_000);
    const late = await post(b.base, '/v2/models/late/infer', addInputs(2));
    assert.deepEqual((late.body.outputs as { data: number[] }[])[0]?.data, [12, 21]);
    await b.waitForRecord((r) => r.msg === 'the registry changed elsewhere', 'about the change');

    // And through the CLI, a third process on the same registry.
    const cliDir = join(a.work, 'cli-made');
    adderCopy(cliDir, 'cli_made', 'registered by the CLI');
    const cli = ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts'), '--registry', db.url, '--replica-id', 'cli'];
    await run(process.execPath, [...cli, 'register', cliDir]);
    await Promise.all([waitReady(a.base, 'cli_made', 30_000), waitReady(b.base, 'cli_made', 30_000)]);

    // Workflows travel the same way: registered by the CLI, run by b.
    const flowDir = join(a.work, 'add_twice');
    cpSync(join(ROOT, 'test', 'fixtures', 'workflows', 'add_twice'), flowDir, { recursive: true });
    await run(process.execPath, [...cli, 'register', flowDir]);
    await waitReady(b.base, 'add_twice', 30_000);
    const flow = await post(b.base, '/v2/models/add_twice/infer', addInputs(1));
    assert.equal(flow.status, 200, JSON.stringify(flow.body));
    assert.deepEqual((flow.body.outputs as { data: number[] }[]).find((o) => o.data)?.data, [21, 41]);
  });

  it('a tensor:// handle names its replica; the other replica answers HANDLE_ELSEWHERE', async () => {
    const [onA, onB] = await Promise.all([mcpClient(a.url), mcpClient(b.url)]);
    try {
      const first = await onA.callTool({
        name: 'infer',
        arguments: { model: 'adder', inputs: { a: [[1, 2]], b: [[3, 4]] } },
      });
      const uri = (first.structuredContent as { outputs: { uri: string }[] }).outputs[0]?.uri as string;
      assert.match(uri, /^tensor:\/\/replica-a\.[\w-]+$/);
      const elsewhere = await onB.callTool({
        name: 'infer',
        arguments: { model: 'adder', inputs: { a: uri, b: uri } },
      });
      assert.equal(elsewhere.isError, true);
      const text = (elsewhere.content as { text: string }[])[0]?.text ?? '';
      assert.match(text, /^HANDLE_ELSEWHERE: .* made by replica replica-a, and this request reached replica replica-b/);
      const here = await onA.callTool({ name: 'infer', arguments: { model: 'adder', inputs: { a: uri, b: uri } } });
      assert.notEqual(here.isError, true);
      assert.deepEqual(summaryValues(here), [[8, 12]]);
    } finally {
      await Promise.all([onA.close(), onB.close()]);
    }
  });

  it('MCP works through a round-robin balancer, sessions included: a request of a session the other replica holds is served here', async () => {
    const balancer = await roundRobin([a.base, b.base]);
    const client = await mcpClient(balancer.url);
    try {
      for (let i = 0; i < 6; i++) {
        const result = await client.callTool({
          name: 'infer',
          arguments: { model: 'adder', inputs: { a: [[i, 0]], b: [[1, 1]] } },
        });
        assert.notEqual(result.isError, true, JSON.stringify(result.content));
        assert.deepEqual(summaryValues(result), [[i + 1, 1]]);
      }
      assert.ok(
        balancer.sent.every((n) => n >= 3),
        `each replica served some of the calls: ${balancer.sent}`,
      );
    } finally {
      await client.close();
      balancer.server.close();
    }
    // A session id this replica made but no longer holds is still answered 404: initialize again.
    const expired = await fetch(b.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': 'replica-b.2b1f6c1e-0000-4000-8000-000000000000',
        'mcp-protocol-version': '2025-06-18',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    assert.equal(expired.status, 404);
  });

  it('a lost database: loaded models keep serving, registrations fail clearly, then work once it is back', async () => {
    await db.stop();
    try {
      for (const replica of [a, b]) {
        const served = await post(replica.base, '/v2/models/adder/infer', addInputs(3));
        assert.equal(served.status, 200, JSON.stringify(served.body));
      }
      const refused = await post(a.base, '/v2/repository/models/late/load');
      assert.equal(refused.status, 503);
      assert.match(
        String(refused.body.error),
        /^REGISTRY_UNAVAILABLE: the shared registry at postgres:\/\/tensorgate:\*\*\*@/,
      );
      await a.waitForRecord((r) => /^lost the registry at/.test(r.msg), 'about the lost registry');
      assert.match(await (await fetch(`${a.base}/metrics`)).text(), /^tensorgate_registry_up 0$/m);
    } finally {
      await db.start();
    }
    await Promise.all(
      [a, b].map((replica) =>
        replica.waitForRecord((r) => /is reachable again$/.test(r.msg), 'about the registry coming back', 30_000),
      ),
    );
    assert.match(await (await fetch(`${a.base}/metrics`)).text(), /^tensorgate_registry_up 1$/m);
    adderCopy(join(a.work, 'models', 'after_outage'), 'after_outage', 'registered once the database was back');
    const load = await post(a.base, '/v2/repository/models/after_outage/load');
    assert.equal(load.status, 200, JSON.stringify(load.body));
    await waitReady(b.base, 'after_outage', 30_000);
    for (const replica of [a, b]) assert.doesNotMatch(replica.stderr(), new RegExp(PASSWORD));
  });

  it('concurrent registrations of one name from both replicas leave one consistent registration', async () => {
    adderCopy(join(a.work, 'models', 'contested'), 'contested', 'from a');
    adderCopy(join(b.work, 'models', 'contested'), 'contested', 'from b');
    // The b copy has a second version, so a mix of the two would show in the versions table.
    cpSync(join(b.work, 'models', 'contested', '1'), join(b.work, 'models', 'contested', '2'), { recursive: true });
    const answers = await Promise.all(
      [a, b, a, b, a, b].map((replica) => post(replica.base, '/v2/repository/models/contested/load')),
    );
    for (const { status, body } of answers)
      assert.ok(
        status === 200 || (status === 409 && /^REGISTRATION_CONFLICT: /.test(String(body.error))),
        `${status} ${JSON.stringify(body)}`,
      );
    assert.ok(answers.some((x) => x.status === 200));

    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const { rows } = await client.query<{ dir: string; config: { description: string; versions: object } }>(
        "SELECT dir, config FROM models WHERE name = 'contested'",
      );
      const stored = rows[0];
      assert.ok(stored);
      const versions = await client.query<{ version: string }>(
        "SELECT version FROM model_versions WHERE model = 'contested' ORDER BY version",
      );
      assert.deepEqual(
        versions.rows.map((r) => r.version),
        Object.keys(stored.config.versions).sort(),
      );
      assert.equal(stored.config.description, stored.dir.startsWith(a.work) ? 'from a' : 'from b');
      // Both replicas settle on what the registry holds.
      for (const replica of [a, b]) {
        const deadline = Date.now() + 30_000;
        for (;;) {
          const res = await fetch(`${replica.base}/v2/models/contested`);
          const meta = (await res.json()) as { versions?: string[] };
          if (JSON.stringify(meta.versions) === JSON.stringify(Object.keys(stored.config.versions).sort())) break;
          if (Date.now() > deadline) throw new Error(`${replica.base} did not settle: ${JSON.stringify(meta)}`);
          await sleep(100);
        }
        await waitReady(replica.base, 'contested', 30_000);
      }
    } finally {
      await client.end();
    }
  });
});
