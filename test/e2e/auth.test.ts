import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { SignJWT } from 'jose';
import { parseApiKey } from '../../src/security/api-keys.js';
import { ROOT } from '../helpers/models.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * Authentication on every network surface, with real parts: keys made by the real CLI, the real
 * server, node's HTTP and HTTPS clients, the official MCP client, a gRPC client, JWTs signed with
 * jose, a certificate made by openssl for the test.
 */

const run = promisify(execFile);
const CLI = ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts')];
const SECRET = 'a-test-secret-that-is-long-enough-for-hs256!';

async function cli(args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [...CLI, ...args], { cwd: ROOT });
  return stdout.trim();
}

async function get(url: string, token?: string): Promise<Response> {
  return fetch(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});
}

function jwt(claims: Record<string, unknown>, secret = SECRET, expiresIn: string | number = '5m') {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('agent-7')
    .setIssuedAt()
    .setExpirationTime(expiresIn)
    .sign(new TextEncoder().encode(secret));
}

describe('authentication on HTTP, MCP and gRPC', { timeout: 240_000 }, () => {
  let work: string;
  let keysFile: string;
  let key: string;
  let served: Served;
  let grpcAddress: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'tg-auth-'));
    keysFile = join(work, 'keys.json');
    key = await cli([
      '--audit-log',
      join(work, 'audit.jsonl'),
      'keys',
      'create',
      '--name',
      'ci',
      '--role',
      'inference',
      '--file',
      keysFile,
    ]);
    writeFileSync(join(work, 'jwt-secret'), SECRET);
    served = await serveOne('adder', {
      serveArgs: ['--auth', 'on', '--api-keys', keysFile, '--jwt-secret-file', join(work, 'jwt-secret'), '--grpc', '0'],
    });
    grpcAddress = /OIP v2 gRPC at ([\d.]+:\d+)/.exec(served.stderr())?.[1] as string;
  });

  after(async () => {
    await served?.stop();
  });

  it('stores the key hashed, shows it once, and audits its creation', () => {
    assert.match(key, /^tgk_[a-z0-9]{12}_[A-Za-z0-9_-]{43}$/);
    const file = readFileSync(keysFile, 'utf8');
    assert.ok(!file.includes(parseApiKey(key)?.secret as string), 'the secret is not in the key file');
    assert.match(file, /"sha256": "[0-9a-f]{64}"/);
    const audit = readFileSync(join(work, 'audit.jsonl'), 'utf8');
    assert.match(audit, /"action":"create_api_key"/);
    assert.ok(!audit.includes(key), 'the audit log never holds the key');
  });

  it('refuses every route but health and the dashboard shell without a credential, with an RFC 9728 challenge', async () => {
    for (const path of [
      '/v2/models/adder',
      '/metrics',
      '/dashboard/api/snapshot',
      '/dashboard/api/events',
      '/v2',
      '/mcp',
    ]) {
      const res = await get(`${served.base}${path}`);
      assert.equal(res.status, 401, path);
      const challenge = res.headers.get('www-authenticate') ?? '';
      assert.match(challenge, /^Bearer /, path);
      assert.match(
        challenge,
        new RegExp(`resource_metadata="${served.base}/.well-known/oauth-protected-resource/mcp"`),
      );
      assert.equal(((await res.json()) as { code: string }).code, 'UNAUTHENTICATED');
    }
    for (const path of ['/healthz', '/v2/health/live']) assert.equal((await get(`${served.base}${path}`)).status, 200);
    // The dashboard's page and files hold no data: a browser needs them to sign in.
    for (const path of ['/dashboard', '/dashboard/assets/app.js'])
      assert.equal((await get(`${served.base}${path}`)).status, 200, path);
    const metadata = (await (await get(`${served.base}/.well-known/oauth-protected-resource/mcp`)).json()) as Record<
      string,
      unknown
    >;
    assert.equal(metadata.resource, served.url);
    assert.deepEqual(metadata.bearer_methods_supported, ['header']);
  });

  it('serves OIP v2 and MCP to a caller with a valid API key', async () => {
    const meta = await get(`${served.base}/v2/models/adder`, key);
    assert.equal(meta.status, 200);
    const infer = await fetch(`${served.base}/v2/models/adder/infer`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        inputs: [
          { name: 'a', shape: [1, 2], datatype: 'FP32', data: [1, 2] },
          { name: 'b', shape: [1, 2], datatype: 'FP32', data: [10, 20] },
        ],
      }),
    });
    assert.equal(infer.status, 200);
    assert.deepEqual(((await infer.json()) as { outputs: { data: number[] }[] }).outputs[0]?.data, [11, 22]);

    const client = new Client({ name: 'auth-test', version: '0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(served.url), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
    const listed = await client.callTool({ name: 'list_models', arguments: {} });
    assert.equal(listed.isError, undefined);
    await client.close();

    const anonymous = new Client({ name: 'auth-test', version: '0' });
    await assert.rejects(anonymous.connect(new StreamableHTTPClientTransport(new URL(served.url))), /UNAUTHENTICATED/);
  });

  it('accepts JWTs signed with the secret, for this audience, unexpired; nothing else', async () => {
    const path = `${served.base}/v2/models/adder`;
    assert.equal((await get(path, await jwt({ aud: served.url, roles: ['monitor'] }))).status, 200);
    assert.equal((await get(path, await jwt({ aud: 'https://elsewhere.example/mcp' }))).status, 401);
    assert.equal(
      (await get(path, await jwt({ aud: served.url }, SECRET, Math.floor(Date.now() / 1000) - 60))).status,
      401,
    );
    assert.equal((await get(path, await jwt({ aud: served.url }, `${SECRET}-other`))).status, 401);
    const tampered = `${key.slice(0, -2)}${key.endsWith('AA') ? 'BB' : 'AA'}`;
    assert.equal((await get(path, tampered)).status, 401);
  });

  it('guards gRPC the same way, health aside', async () => {
    const definition = protoLoader.loadSync(join(ROOT, 'proto/grpc_service.proto'), { keepCase: true, defaults: true });
    const Service = (grpc.loadPackageDefinition(definition).inference as grpc.GrpcObject)
      .GRPCInferenceService as grpc.ServiceClientConstructor;
    const client = new Service(grpcAddress, grpc.credentials.createInsecure());
    const call = (method: string, metadata = new grpc.Metadata()) =>
      new Promise<unknown>((resolve, reject) =>
        (client[method] as (r: unknown, m: grpc.Metadata, cb: (e: unknown, v: unknown) => void) => void).call(
          client,
          method === 'ModelMetadata' ? { name: 'adder' } : {},
          metadata,
          (err, value) => (err ? reject(err) : resolve(value)),
        ),
      );
    assert.deepEqual(await call('ServerLive'), { live: true });
    await assert.rejects(call('ModelMetadata'), (err: grpc.ServiceError) => {
      assert.equal(err.code, grpc.status.UNAUTHENTICATED);
      assert.match(err.details, /^UNAUTHENTICATED: /);
      return true;
    });
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${key}`);
    assert.equal(((await call('ModelMetadata', metadata)) as { name: string }).name, 'adder');
    client.close();
  });

  it('audits refused credentials by route and reason, never with the credential', async () => {
    await get(`${served.base}/v2/models/adder`, 'tgk_000000000000_not-a-real-secret-not-a-real-secret-not-a-re');
    const entries = readFileSync(join(served.work, 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const failed = entries.filter((e) => e.action === 'auth_failed');
    assert.ok(failed.some((e) => e.target === 'http:/metrics' && /Missing Authorization/.test(String(e.reason))));
    assert.ok(failed.some((e) => e.target === 'grpc:ModelMetadata'));
    assert.ok(failed.every((e) => String(e.actor).startsWith('remote:')));
    assert.ok(!readFileSync(join(served.work, 'audit.jsonl'), 'utf8').includes('not-a-real-secret'));
  });

  it('refuses a revoked key from the next request on, without a restart', async () => {
    const id = parseApiKey(key)?.id as string;
    await cli(['--audit-log', join(work, 'audit.jsonl'), 'keys', 'revoke', id, '--file', keysFile]);
    assert.equal((await get(`${served.base}/v2/models/adder`, key)).status, 401);
    assert.match(readFileSync(join(work, 'audit.jsonl'), 'utf8'), /"action":"revoke_api_key"/);
  });
});

describe('auth defaults', { timeout: 120_000 }, () => {
  /** Runs serve and resolves with its exit code and stderr (it is expected to refuse to start). */
  function refused(args: string[]): Promise<{ code: number | null; stderr: string }> {
    const work = mkdtempSync(join(tmpdir(), 'tg-auth-refused-'));
    const child = spawn(
      process.execPath,
      [...CLI, '--models', join(work, 'none'), '--registry', join(work, 'r.db'), 'serve', ...args],
      {
        cwd: ROOT,
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr?.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    return new Promise((resolve) => child.once('exit', (code) => resolve({ code, stderr })));
  }

  it('will not listen on a non-loopback address without a credential', async () => {
    const { code, stderr } = await refused([
      '--http',
      '0',
      '--host',
      '0.0.0.0',
      '--api-keys',
      '/nonexistent/keys.json',
    ]);
    assert.equal(code, 1);
    assert.match(stderr, /AUTH_NOT_CONFIGURED: serving on 0\.0\.0\.0 needs authentication/);
  });

  it('will not turn auth on without a credential to check', async () => {
    const { code, stderr } = await refused(['--http', '0', '--auth', 'on', '--api-keys', '/nonexistent/keys.json']);
    assert.equal(code, 1);
    assert.match(stderr, /AUTH_NOT_CONFIGURED/);
  });
});

describe('TLS', { timeout: 120_000 }, () => {
  let served: Served;
  let cert: Buffer;

  before(async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-tls-'));
    await run('openssl', [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      join(work, 'key.pem'),
      '-out',
      join(work, 'cert.pem'),
    ]);
    cert = readFileSync(join(work, 'cert.pem'));
    served = await serveOne('adder', {
      serveArgs: ['--tls-cert', join(work, 'cert.pem'), '--tls-key', join(work, 'key.pem'), '--oip-port', '0'],
    });
  });

  after(async () => {
    await served?.stop();
  });

  it('serves HTTPS with TLS 1.3 and refuses TLS 1.2, on the OIP data port too', async () => {
    assert.match(served.url, /^https:\/\/127\.0\.0\.1:\d+\/mcp$/);
    const { port } = new URL(served.url);
    const status = await new Promise<number | undefined>((resolve, reject) =>
      httpsRequest(`${served.base}/v2/health/live`, { ca: cert }, (res) => {
        res.resume();
        resolve(res.statusCode);
      })
        .on('error', reject)
        .end(),
    );
    assert.equal(status, 200);
    const protocol = await new Promise<string | null>((resolve, reject) => {
      const socket = tlsConnect({ host: '127.0.0.1', port: Number(port), ca: cert }, () => {
        resolve(socket.getProtocol());
        socket.end();
      }).on('error', reject);
    });
    assert.equal(protocol, 'TLSv1.3');
    // The OIP data port is HTTPS with the same certificate.
    const data = /OIP v2 data plane at (https:\/\/[\d.]+:\d+)\/v2/.exec(served.stderr())?.[1];
    assert.ok(data, 'the data port is announced as https');
    const dataStatus = await new Promise<number | undefined>((resolve, reject) =>
      httpsRequest(`${data}/v2/health/live`, { ca: cert }, (res) => {
        res.resume();
        resolve(res.statusCode);
      })
        .on('error', reject)
        .end(),
    );
    assert.equal(dataStatus, 200);
    await assert.rejects(
      new Promise((resolve, reject) => {
        const socket = tlsConnect(
          { host: '127.0.0.1', port: Number(new URL(data).port), ca: cert, maxVersion: 'TLSv1.2' },
          () => {
            socket.end();
            resolve(undefined);
          },
        ).on('error', reject);
      }),
      /protocol version|alert|handshake/i,
    );
    await assert.rejects(
      new Promise((resolve, reject) => {
        const socket = tlsConnect({ host: '127.0.0.1', port: Number(port), ca: cert, maxVersion: 'TLSv1.2' }, () => {
          socket.end();
          resolve(undefined);
        }).on('error', reject);
      }),
      /protocol version|alert|handshake/i,
    );
  });
});
