import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import type { Gateway } from '../../src/gateway.js';
import { type HttpServerHandle, serveHttp } from '../../src/http/server.js';
import { ApiKeyStore } from '../../src/security/api-keys.js';
import { Authenticator } from '../../src/security/auth.js';
import { RateLimiter } from '../../src/security/rate-limit.js';
import { modelCopy, openGateway } from '../helpers/gateway.js';
import { ensureTestModels, ROOT } from '../helpers/models.js';
import { waitFor } from '../helpers/wait.js';

/**
 * The OIP data plane (`serve --oip-port`): a real gateway and real torch workers behind the
 * protocol's data routes on a port of their own, read by two threads. Binary tensor data is
 * staged by the threads and read by the workers from the staging file: the answers must be the
 * main port's, bit for bit, each caller's own under batching, and every failure the protocol's
 * error with the server serving on.
 */

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  json: Record<string, unknown>;
  /** The binary outputs after the JSON header. */
  binary: Buffer;
}

/** A keep-alive agent per client: separate connections, which the kernel spreads over the threads. */
function client(): Agent {
  return new Agent({ keepAlive: true, maxSockets: 1 });
}

function send(
  base: string,
  method: string,
  path: string,
  body?: Buffer,
  headers: Record<string, string | number> = {},
  agent?: Agent,
): Promise<Answer> {
  const [host, port] = base.split(':');
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host,
        port,
        method,
        path,
        ...(agent ? { agent } : {}),
        headers: { ...headers, ...(body ? { 'content-length': body.length } : {}) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const all = Buffer.concat(chunks);
          const split = Number(res.headers['inference-header-content-length'] ?? all.length);
          const text = all.subarray(0, split).toString();
          resolve({
            status: res.statusCode as number,
            headers: res.headers,
            json: text ? JSON.parse(text) : {},
            binary: all.subarray(split),
          });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** An infer body with `x` as binary data and the named outputs asked for as binary. */
function binaryInfer(x: Float32Array, shape: number[], outputs: string[], extra: Record<string, unknown> = {}) {
  const header = Buffer.from(
    JSON.stringify({
      ...extra,
      inputs: [{ name: 'x', datatype: 'FP32', shape, parameters: { binary_data_size: x.byteLength } }],
      outputs: outputs.map((name) => ({ name, parameters: { binary_data: true } })),
    }),
  );
  return {
    body: Buffer.concat([header, Buffer.from(x.buffer, x.byteOffset, x.byteLength)]),
    headers: { 'inference-header-content-length': header.length, 'content-type': 'application/octet-stream' },
  };
}

/** The contents of this process's data-plane staging files (unlinked, reached by descriptor). */
function stagingFiles(): Buffer[] {
  const prefix = `/dev/shm/tensorgate-${process.pid}-oip-`;
  const found: Buffer[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    let target: string;
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue;
    }
    if (target.startsWith(prefix)) found.push(readFileSync(`/proc/self/fd/${fd}`));
  }
  return found;
}

describe('the OIP data plane', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let handle: HttpServerHandle;
  let work: string;
  let data: string;

  before(async () => {
    const models = ensureTestModels();
    work = mkdtempSync(join(tmpdir(), 'tg-data-plane-'));
    gateway = await openGateway(work, { maxHttpBodyBytes: 256 * 1024 });
    await gateway.register(modelCopy(models, 'mlp', work, 'mlp'));
    // sleepy answers x * 2; a 300 ms delay makes concurrent calls one batch.
    await gateway.register(
      modelCopy(models, 'sleepy', work, 'sleepy-batched', (c) => {
        c.batching = { max_batch_size: 256, max_queue_delay_us: 300_000, adaptive_delay: false };
      }),
    );
    // Binary data of 256 bytes or more is staged (by default 16 KB: smaller goes in the message).
    handle = await serveHttp(gateway, 0, '127.0.0.1', {
      dataPlane: { port: 0, threads: 2, staging: { fromBytes: 256 } },
    });
    data = handle.dataPlaneUrl as string;
  });

  after(async () => {
    await handle?.close();
    await gateway?.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('listens on its own port with two threads', () => {
    assert.notEqual(data, handle.oipUrl);
    assert.equal(handle.dataPlane?.threadIds.length, 2);
  });

  it('answers binary infer bit for bit as the main port does, the tensor staged by a thread and read by the worker', async () => {
    // A pattern that is nowhere else: found in a staging file only if a thread put it there.
    const x = new Float32Array(48 * 4).map((_, i) => Math.sin(i * 1.7) * 11 + 0.123);
    const { body, headers } = binaryInfer(x, [48, 4], ['logits', 'label'], { id: 'req-7' });
    const adapters: (string | undefined)[] = [];
    const stop = gateway.observe({ finished: (r) => adapters.push(r.adapter), failed: () => {} });
    const viaMain = await send(handle.oipUrl, 'POST', '/v2/models/mlp/infer', body, headers);
    const viaData = await send(data, 'POST', '/v2/models/mlp/infer', body, headers);
    // Logs and traces tell the front doors apart (observers hear of a request once answered).
    await waitFor('both requests observed', () => (adapters.length === 2 ? true : undefined));
    stop();
    assert.deepEqual(adapters, ['oip-rest', 'oip-data']);
    assert.equal(viaMain.status, 200, JSON.stringify(viaMain.json));
    assert.equal(viaData.status, 200, JSON.stringify(viaData.json));
    assert.equal(viaData.json.id, 'req-7');
    assert.deepEqual(viaData.json.outputs, viaMain.json.outputs);
    assert.ok(viaData.binary.length > 48 * 3 * 4);
    assert.ok(viaData.binary.equals(viaMain.binary), 'the outputs differ between the ports');
    const xBytes = Buffer.from(x.buffer);
    assert.ok(
      stagingFiles().some((file) => file.indexOf(xBytes) >= 0),
      'the input bytes are in no staging file: the request did not go through the data plane',
    );
    // Under the staging threshold the tensor travels in the message: the same answer, not staged.
    const small = new Float32Array(8 * 4).map((_, i) => Math.cos(i * 2.3) * 7 - 0.321);
    const smallCall = binaryInfer(small, [8, 4], ['logits', 'label']);
    const [smallMain, smallData] = [
      await send(handle.oipUrl, 'POST', '/v2/models/mlp/infer', smallCall.body, smallCall.headers),
      await send(data, 'POST', '/v2/models/mlp/infer', smallCall.body, smallCall.headers),
    ];
    assert.equal(smallData.status, 200, JSON.stringify(smallData.json));
    assert.ok(smallData.binary.equals(smallMain.binary));
    assert.ok(
      !stagingFiles().some((file) => file.indexOf(Buffer.from(small.buffer)) >= 0),
      'a small tensor was staged',
    );
  });

  it('refuses a Host or an Origin it does not serve on both ports (DNS rebinding), a good Host accepted again and again', async () => {
    for (const base of [handle.oipUrl, data]) {
      const port = base.split(':')[1];
      const ready = (headers: Record<string, string>) => send(base, 'GET', '/v2/health/ready', undefined, headers);
      for (let i = 0; i < 3; i++) {
        assert.equal((await ready({ host: `127.0.0.1:${port}` })).status, 200, base);
        assert.equal((await ready({ host: `localhost:${port}` })).status, 200, base);
        const rebound = await ready({ host: `attacker.example:${port}` });
        assert.equal(rebound.status, 403, base);
        assert.match(JSON.stringify(rebound.json), /attacker\.example|[Hh]ost/);
        const foreign = await ready({ host: `127.0.0.1:${port}`, origin: 'http://attacker.example' });
        assert.equal(foreign.status, 403, base);
        const local = await ready({ host: `127.0.0.1:${port}`, origin: `http://localhost:${port}` });
        assert.equal(local.status, 200, base);
      }
    }
  });

  it('answers JSON data, metadata and readiness as the main port does', async () => {
    const body = Buffer.from(
      JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] }),
    );
    const viaMain = await send(handle.oipUrl, 'POST', '/v2/models/mlp/infer', body);
    const viaData = await send(data, 'POST', '/v2/models/mlp/infer', body);
    assert.equal(viaData.status, 200, JSON.stringify(viaData.json));
    assert.deepEqual(viaData.json.outputs, viaMain.json.outputs);
    for (const path of ['/v2', '/v2/models/mlp', '/v2/models/mlp/versions/1']) {
      const [m, d] = [await send(handle.oipUrl, 'GET', path), await send(data, 'GET', path)];
      assert.equal(d.status, 200, path);
      assert.deepEqual(d.json, m.json, path);
    }
    for (const path of ['/v2/health/live', '/v2/health/ready', '/v2/models/mlp/ready'])
      assert.equal((await send(data, 'GET', path)).status, 200, path);
    assert.equal((await send(data, 'GET', '/v2/models/mlp/versions/9/ready')).status, 404);
  });

  it('batches concurrent calls from both threads and answers each caller its own rows', async () => {
    const calls = Array.from({ length: 12 }, (_, i) => {
      const rows = 20 + (i % 3); // 320-352 bytes: staged
      return new Float32Array(rows * 4).map((_, j) => i * 100 + j + 0.5);
    });
    const answers = await Promise.all(
      calls.map((x) => {
        const { body, headers } = binaryInfer(x, [x.length / 4, 4], ['y']);
        return send(data, 'POST', '/v2/models/sleepy-batched/infer', body, headers, client());
      }),
    );
    for (const [i, answer] of answers.entries()) {
      assert.equal(answer.status, 200, JSON.stringify(answer.json));
      const y = new Float32Array(
        answer.binary.buffer.slice(answer.binary.byteOffset, answer.binary.byteOffset + answer.binary.length),
      );
      assert.deepEqual(
        [...y],
        [...(calls[i] as Float32Array)].map((v) => v * 2),
        `call ${i} got another's rows`,
      );
    }
    const batches = answers.map((a) => (a.json.parameters as { batch_size: number }).batch_size);
    assert.ok(Math.max(...batches) > 22, `no call shared a batch: ${batches}`);
  });

  it('refuses bad requests with the protocol errors and serves on', async () => {
    const x = new Float32Array(8).fill(1);
    const good = binaryInfer(x, [2, 4], ['logits']);
    const unknown = await send(data, 'POST', '/v2/models/nope/infer', good.body, good.headers);
    assert.equal(unknown.status, 404);
    assert.match(String(unknown.json.error), /^MODEL_NOT_FOUND: /);

    const short = binaryInfer(x, [2, 4], ['logits']);
    short.headers['inference-header-content-length'] = short.body.length + 10;
    const pastEnd = await send(data, 'POST', '/v2/models/mlp/infer', short.body, short.headers);
    assert.equal(pastEnd.status, 400);
    assert.match(String(pastEnd.json.error), /^INVALID_REQUEST: Inference-Header-Content-Length/);

    const wrong = binaryInfer(x, [3, 4], ['logits']); // 12 values declared, 8 sent
    const mismatch = await send(data, 'POST', '/v2/models/mlp/infer', wrong.body, wrong.headers);
    assert.equal(mismatch.status, 400);
    assert.match(String(mismatch.json.error), /^BYTE_LENGTH_MISMATCH: /);

    const big = binaryInfer(new Float32Array(80_000), [20_000, 4], ['logits']);
    const tooLarge = await send(data, 'POST', '/v2/models/mlp/infer', big.body, big.headers);
    assert.equal(tooLarge.status, 413);
    assert.match(String(tooLarge.json.error), /^INPUT_TOO_LARGE: .*--max-body-mb/);

    const elsewhere = await send(data, 'GET', '/metrics');
    assert.equal(elsewhere.status, 404);
    assert.match(String(elsewhere.json.error), /main port/);
    const badName = await send(data, 'GET', '/v2/models/%E0%A4%A/ready');
    assert.equal(badName.status, 400);

    const after = await send(data, 'POST', '/v2/models/mlp/infer', good.body, good.headers);
    assert.equal(after.status, 200, JSON.stringify(after.json));
  });

  it('replaces a thread that dies and serves on', async () => {
    const plane = handle.dataPlane as NonNullable<HttpServerHandle['dataPlane']>;
    const before = plane.threadIds;
    await plane.workers[0]?.terminate();
    await waitFor('a new thread 0', () => (plane.threadIds[0] !== before[0] ? true : undefined), 20_000);
    // Fresh connections, so that both the new thread and the old one take some.
    const x = new Float32Array([1, 2, 3, 4]);
    const { body, headers } = binaryInfer(x, [1, 4], ['y']);
    await waitFor(
      'an answer from the data port',
      async () =>
        (await send(data, 'POST', '/v2/models/sleepy-batched/infer', body, headers).catch(() => undefined))?.status ===
        200
          ? true
          : undefined,
      20_000,
    );
    const answers = await Promise.all(
      Array.from({ length: 6 }, () => send(data, 'POST', '/v2/models/sleepy-batched/infer', body, headers, client())),
    );
    for (const a of answers)
      assert.deepEqual(
        [...new Float32Array(a.binary.buffer.slice(a.binary.byteOffset, a.binary.byteOffset + 16))],
        [2, 4, 6, 8],
      );
  });

  it("gives tritonclient the main port's answers", {
    skip: !existsSync(pyclients()) && 'no .tensorgate/pyclients',
  }, async () => {
    // Not execFileSync: the server runs in this process.
    const { stdout: out } = await promisify(execFile)(
      pyclients(),
      [join(ROOT, 'test/fixtures/triton_data_plane_client.py'), handle.oipUrl, data],
      { encoding: 'utf8', cwd: join(ROOT, 'test/fixtures') },
    );
    const report = JSON.parse(out) as Record<'main' | 'data', Record<string, unknown>>;
    assert.equal(report.data.live, true);
    assert.equal(report.data.ready, true);
    assert.equal(report.data.model_ready, true);
    assert.equal(report.data.id, 'dp-1');
    assert.match(String(report.data.unknown_model), /MODEL_NOT_FOUND/);
    assert.match(String(report.data.wrong_shape), /^SHAPE_MISMATCH: /);
    assert.deepEqual(report.data, report.main);
  });
});

function pyclients(): string {
  return join(ROOT, '.tensorgate', 'pyclients', 'bin', 'python');
}

describe('the OIP data plane with no room to stage', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let handle: HttpServerHandle;
  let work: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'tg-data-plane-full-'));
    gateway = await openGateway(work);
    await gateway.register(modelCopy(ensureTestModels(), 'mlp', work, 'mlp'));
    // A staging file of 8 KB that may not grow: a 16 KB tensor finds no room.
    handle = await serveHttp(gateway, 0, '127.0.0.1', {
      dataPlane: { port: 0, threads: 1, staging: { bytes: 8192, limit: 8192, fromBytes: 0 } },
    });
  });

  after(async () => {
    await handle?.close();
    await gateway?.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('sends a body that does not fit through the main thread, and answers it the same', async () => {
    const data = handle.dataPlaneUrl as string;
    for (const rows of [16, 1024]) {
      const x = new Float32Array(rows * 4).map((_, i) => Math.cos(i * 0.37) * 5 + rows);
      const { body, headers } = binaryInfer(x, [rows, 4], ['logits', 'label']);
      const viaMain = await send(handle.oipUrl, 'POST', '/v2/models/mlp/infer', body, headers);
      const viaData = await send(data, 'POST', '/v2/models/mlp/infer', body, headers);
      assert.equal(viaData.status, 200, JSON.stringify(viaData.json));
      assert.ok(viaData.binary.equals(viaMain.binary), `${rows} rows: the outputs differ between the ports`);
      const inStaging = stagingFiles().some((file) => file.indexOf(Buffer.from(x.buffer)) >= 0);
      assert.equal(inStaging, rows === 16, `${rows} rows staged: ${inStaging}`);
    }
    const { text } = await gateway.metrics.render();
    assert.match(text, /^tensorgate_oip_data_plane_bodies_total\{staging="staged"\} 1$/m);
    assert.match(text, /^tensorgate_oip_data_plane_bodies_total\{staging="unstaged"\} 1$/m);
  });
});

describe('the OIP data plane with auth on', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let handle: HttpServerHandle;
  let work: string;
  let data: string;
  const keys: Record<string, string> = {};

  before(async () => {
    const models = ensureTestModels();
    work = mkdtempSync(join(tmpdir(), 'tg-data-plane-auth-'));
    const keyFile = join(work, 'keys.json');
    const store = new ApiKeyStore(keyFile);
    keys.inference = store.create('caller', ['inference']).key;
    keys.monitor = store.create('watcher', ['monitor']).key;
    keys.limited = store.create('slow', ['inference'], 1).key;
    gateway = await openGateway(work);
    await gateway.register(modelCopy(models, 'mlp', work, 'mlp'));
    const authenticator = Authenticator.create({ mode: 'on', apiKeysPath: keyFile }, '127.0.0.1');
    assert.ok(authenticator);
    handle = await serveHttp(gateway, 0, '127.0.0.1', {
      authenticator,
      // As serve makes it: no default rate, a key's own applies.
      rateLimiter: new RateLimiter({ defaultRps: 0 }),
      dataPlane: { port: 0, threads: 1 },
    });
    data = handle.dataPlaneUrl as string;
  });

  after(async () => {
    await handle?.close();
    await gateway?.close();
    rmSync(work, { recursive: true, force: true });
  });

  it('checks credentials, roles and rates as the main port does; readiness stays open', async () => {
    const { body, headers } = binaryInfer(new Float32Array(4).fill(2), [1, 4], ['logits']);
    const bearer = (key: string) => ({ ...headers, authorization: `Bearer ${key}` });
    const anonymous = await send(data, 'POST', '/v2/models/mlp/infer', body, headers);
    assert.equal(anonymous.status, 401);
    assert.equal(anonymous.json.code, 'UNAUTHENTICATED');
    assert.match(String(anonymous.headers['www-authenticate']), /Bearer/);
    assert.equal((await send(data, 'GET', '/v2/models/mlp')).status, 401);

    const allowed = await send(data, 'POST', '/v2/models/mlp/infer', body, bearer(keys.inference as string));
    assert.equal(allowed.status, 200, JSON.stringify(allowed.json));
    const forbidden = await send(data, 'POST', '/v2/models/mlp/infer', body, bearer(keys.monitor as string));
    assert.equal(forbidden.status, 403);
    assert.match(String(forbidden.json.error), /^FORBIDDEN: /);

    // A key limited to 1 request/s (burst 10): the 11th call in a burst is refused with when to retry.
    const burst = [];
    for (let i = 0; i < 12; i++)
      burst.push(await send(data, 'POST', '/v2/models/mlp/infer', body, bearer(keys.limited as string)));
    const limited = burst.find((a) => a.status === 429);
    assert.ok(limited, `no call was rate-limited: ${burst.map((a) => a.status)}`);
    assert.match(String(limited.json.error), /^RATE_LIMITED: /);
    assert.ok(Number(limited.headers['retry-after']) >= 1);

    assert.equal((await send(data, 'GET', '/v2/health/ready')).status, 200);
    assert.equal((await send(data, 'GET', '/v2/health/live')).status, 200);
  });
});
