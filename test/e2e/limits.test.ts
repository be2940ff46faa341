import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ROOT } from '../helpers/models.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * Per-caller rate limits and the connection limit, on the real server: keys made by the real CLI,
 * node's HTTP client, a gRPC client, and raw kept-alive TCP connections.
 */

const run = promisify(execFile);
const CLI = ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts')];

async function cli(args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [...CLI, ...args], { cwd: ROOT });
  return stdout.trim();
}

describe('per-key rate limits', { timeout: 180_000 }, () => {
  let keysFile: string;
  let slow: string;
  let fast: string;
  let served: Served;
  let grpcAddress: string;

  before(async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-limits-'));
    keysFile = join(work, 'keys.json');
    const create = (name: string, extra: string[]) =>
      cli([
        '--audit-log',
        join(work, 'audit.jsonl'),
        'keys',
        'create',
        '--name',
        name,
        '--role',
        'inference',
        '--file',
        keysFile,
        ...extra,
      ]);
    slow = await create('slow', ['--rate-limit', '1']);
    fast = await create('fast', []);
    // The server-wide limit is far above what one sequential client can send (a fast host sends
    // several requests per millisecond); the burst of 3 applies to both, the slow key's 1/s is its own.
    served = await serveOne('adder', {
      serveArgs: ['--auth', 'on', '--api-keys', keysFile, '--rate-limit', '100000', '--rate-burst', '3', '--grpc', '0'],
    });
    await served.waitForRecord((r) => r.msg.startsWith('ready:'), 'the models loaded');
    grpcAddress = /OIP v2 gRPC at ([\d.]+:\d+)/.exec(served.stderr())?.[1] as string;
  });

  after(async () => {
    await served?.stop();
  });

  const get = (path: string, token?: string) =>
    fetch(`${served.base}${path}`, token ? { headers: { authorization: `Bearer ${token}` } } : {});

  it('lists the limit with the key', async () => {
    const listed = await cli(['keys', 'list', '--file', keysFile]);
    assert.match(listed, /slow {2}roles: inference {2}1 requests\/s/);
    assert.doesNotMatch(listed.split('\n').find((l) => l.includes('fast')) as string, /requests\/s/);
  });

  it('answers 429 with Retry-After past a key’s burst, leaves other keys and health alone, and refills', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await get('/v2/models/adder', slow)).status, 200, `request ${i}`);
    const refused = await get('/v2/models/adder', slow);
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('retry-after'), '1');
    const body = (await refused.json()) as { error: string };
    assert.match(body.error, /^RATE_LIMITED: key:[a-z0-9]{12} is limited to 1 requests per second \(bursts of 3\)/);

    for (let i = 0; i < 20; i++) assert.equal((await get('/v2/models/adder', fast)).status, 200);
    assert.equal((await get('/v2/health/ready')).status, 200, 'health is never limited');

    await sleep(1100);
    assert.equal((await get('/v2/models/adder', slow)).status, 200, 'a token came back after a second');
    assert.equal((await get('/v2/models/adder', slow)).status, 429);
  });

  it('counts gRPC calls against the same bucket: RESOURCE_EXHAUSTED', async () => {
    const definition = protoLoader.loadSync(join(ROOT, 'proto/grpc_service.proto'), { keepCase: true, defaults: true });
    const Service = (grpc.loadPackageDefinition(definition).inference as grpc.GrpcObject)
      .GRPCInferenceService as grpc.ServiceClientConstructor;
    const client = new Service(grpcAddress, grpc.credentials.createInsecure());
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${slow}`);
    const ready = () =>
      new Promise<unknown>((resolve, reject) =>
        client.ModelReady?.({ name: 'adder' }, metadata, (err: unknown, v: unknown) =>
          err ? reject(err) : resolve(v),
        ),
      );
    await assert.rejects(ready(), (err: grpc.ServiceError) => {
      assert.equal(err.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.match(err.details, /^RATE_LIMITED: /);
      return true;
    });
    client.close();
  });
});

/** One HTTP/1.1 request on a kept-alive raw connection; resolves with the status line and body. */
function requestOn(socket: Socket, path: string): Promise<{ status: number; body: string; close: boolean }> {
  return new Promise((resolve, reject) => {
    let data = '';
    const onData = (chunk: Buffer) => {
      data += chunk.toString();
      const end = data.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = Number(/content-length: (\d+)/i.exec(data.slice(0, end))?.[1] ?? 0);
      if (data.length < end + 4 + length) return;
      socket.off('data', onData);
      resolve({
        status: Number(data.slice(9, 12)),
        body: data.slice(end + 4, end + 4 + length),
        close: /\r\nconnection: close\r\n/i.test(data.slice(0, end + 2)),
      });
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n`);
  });
}

function open(base: string): Promise<Socket> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => resolve(socket));
    socket.once('error', reject);
  });
}

describe('connection limit', { timeout: 120_000 }, () => {
  let served: Served;

  before(async () => {
    served = await serveOne('adder', { serveArgs: ['--max-connections', '2'] });
    await served.waitForRecord((r) => r.msg.startsWith('ready:'), 'the models loaded');
  });

  after(async () => {
    await served?.stop();
  });

  it('answers a connection past --max-connections with 503 and closes it, and serves again once one closes', async () => {
    const first = await open(served.base);
    const second = await open(served.base);
    assert.equal((await requestOn(first, '/v2/models/adder')).status, 200);
    assert.equal((await requestOn(second, '/v2/models/adder')).status, 200);

    const third = await open(served.base);
    const closed = new Promise((resolve) => third.once('close', resolve));
    const refused = await requestOn(third, '/v2/models/adder');
    assert.equal(refused.status, 503);
    assert.ok(refused.close, 'the refused connection is closed');
    assert.match(JSON.parse(refused.body).error, /^TOO_MANY_CONNECTIONS: .*--max-connections/);
    await closed;

    // Kept-alive connections go on being served.
    assert.equal((await requestOn(first, '/v2/health/ready')).status, 200);
    first.destroy();
    await sleep(100);
    const fourth = await open(served.base);
    assert.equal((await requestOn(fourth, '/v2/models/adder')).status, 200);
    second.destroy();
    fourth.destroy();
  });
});
