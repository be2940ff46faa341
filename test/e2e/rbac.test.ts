import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { parseApiKey } from '../../src/security/api-keys.js';
import { ensureDigitsModels, ROOT } from '../helpers/models.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * Every role against every tool and route, allowed and denied, on a real server with auth on:
 * the built-in admin, inference and monitor roles, and a custom role from a roles file that may
 * read and run only models named `add*`. Over MCP (the official client), OIP v2 REST and gRPC.
 */

const run = promisify(execFile);
const CLI = ['--import', 'tsx', join(ROOT, 'src', 'cli', 'main.ts')];
const ROLES = ['admin', 'inference', 'monitor', 'adder-runner'] as const;
type Role = (typeof ROLES)[number];

/** What each role may do, per operation; `true` = allowed. */
const EXPECTED: Record<string, Record<Role, boolean>> = {
  'mcp describe_model adder': { admin: true, inference: true, monitor: true, 'adder-runner': true },
  'mcp describe_model row_sum': { admin: true, inference: true, monitor: true, 'adder-runner': false },
  'mcp infer adder': { admin: true, inference: true, monitor: false, 'adder-runner': true },
  // A model's own tool (it has processing) is checked like infer of that model.
  'mcp digits digits': { admin: true, inference: true, monitor: false, 'adder-runner': false },
  // A batch job is checked like infer of its model, before its items are looked at.
  'mcp start_job digits': { admin: true, inference: true, monitor: false, 'adder-runner': false },
  // A workflow's grant does not widen the caller's: every model it runs is checked too.
  'mcp run_workflow add_twice': { admin: true, inference: true, monitor: false, 'adder-runner': true },
  'mcp run_workflow add_then_sum': { admin: true, inference: true, monitor: false, 'adder-runner': false },
  'mcp load_model adder': { admin: true, inference: false, monitor: false, 'adder-runner': false },
  'mcp get_metrics adder': { admin: true, inference: true, monitor: true, 'adder-runner': true },
  'mcp explain_latency row_sum': { admin: true, inference: true, monitor: true, 'adder-runner': false },
  'mcp get_run some-run': { admin: true, inference: false, monitor: true, 'adder-runner': false },
  'mcp set_hyperparameters some-run': { admin: true, inference: false, monitor: false, 'adder-runner': false },
  'rest GET /v2/models/adder': { admin: true, inference: true, monitor: true, 'adder-runner': true },
  'rest GET /v2/models/row_sum': { admin: true, inference: true, monitor: true, 'adder-runner': false },
  'rest POST /v2/models/adder/infer': { admin: true, inference: true, monitor: false, 'adder-runner': true },
  'rest POST /v2/repository/models/adder/load': {
    admin: true,
    inference: false,
    monitor: false,
    'adder-runner': false,
  },
  'rest POST /v2/systemsharedmemory/region/r/register': {
    admin: true,
    inference: true,
    monitor: false,
    'adder-runner': false,
  },
  'rest GET /v2/models/adder/stats': { admin: true, inference: true, monitor: true, 'adder-runner': true },
  'rest GET /metrics': { admin: true, inference: false, monitor: true, 'adder-runner': false },
  'rest GET /dashboard/api/snapshot': { admin: true, inference: false, monitor: true, 'adder-runner': false },
  'grpc ModelMetadata row_sum': { admin: true, inference: true, monitor: true, 'adder-runner': false },
  'grpc RepositoryModelLoad adder': { admin: true, inference: false, monitor: false, 'adder-runner': false },
};

const ADD = { a: [[1, 2]], b: [[3, 4]] };

describe('RBAC: every role against every tool and route', { timeout: 300_000 }, () => {
  let served: Served;
  const keys = {} as Record<Role, string>;
  const clients = {} as Record<Role, Client>;
  let grpcClient: grpc.Client & Record<string, unknown>;

  before(async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-rbac-'));
    const keysFile = join(work, 'keys.json');
    for (const role of ROLES) {
      const { stdout } = await run(
        process.execPath,
        [
          ...CLI,
          '--audit-log',
          join(work, 'audit.jsonl'),
          'keys',
          'create',
          '--name',
          role,
          '--role',
          role,
          '--file',
          keysFile,
        ],
        { cwd: ROOT },
      );
      keys[role] = stdout.trim();
    }
    const rolesFile = join(work, 'roles.json');
    writeFileSync(
      rolesFile,
      JSON.stringify({
        roles: { 'adder-runner': [{ permissions: ['read', 'execute'], models: ['add*'], workflows: ['add*'] }] },
      }),
    );
    served = await serveOne(['adder', 'row_sum'], {
      workflows: ['add_twice', 'add_then_sum'],
      prepare: (models) => cpSync(join(ensureDigitsModels(), 'digits'), join(models, 'digits'), { recursive: true }),
      serveArgs: ['--api-keys', keysFile, '--roles', rolesFile, '--grpc', '0'],
    });
    for (const role of ROLES) {
      clients[role] = new Client({ name: `rbac-${role}`, version: '0' });
      await clients[role].connect(
        new StreamableHTTPClientTransport(new URL(served.url), {
          requestInit: { headers: { authorization: `Bearer ${keys[role]}` } },
        }),
      );
    }
    const definition = protoLoader.loadSync(join(ROOT, 'proto/grpc_service.proto'), { keepCase: true, defaults: true });
    const Service = (grpc.loadPackageDefinition(definition).inference as grpc.GrpcObject)
      .GRPCInferenceService as grpc.ServiceClientConstructor;
    const address = /OIP v2 gRPC at ([\d.]+:\d+)/.exec(served.stderr())?.[1] as string;
    grpcClient = new Service(address, grpc.credentials.createInsecure()) as grpc.Client & Record<string, unknown>;
  });

  after(async () => {
    for (const client of Object.values(clients)) await client.close();
    grpcClient?.close();
    await served?.stop();
  });

  /** Runs one operation as a role: 'allowed', 'forbidden', or another error code. */
  async function attempt(op: string, role: Role): Promise<string> {
    const [adapter, ...rest] = op.split(' ');
    if (adapter === 'mcp') {
      const [tool, target] = rest as [string, string];
      const args: Record<string, Record<string, unknown>> = {
        describe_model: { model: target },
        infer: { model: target, inputs: ADD },
        run_workflow: { workflow: target, inputs: ADD },
        load_model: { model: target },
        get_metrics: { model: target },
        explain_latency: { model: target },
        get_run: { run: target },
        set_hyperparameters: { run: target, values: { lr: 0.1 } },
        digits: { image: join(ensureDigitsModels(), 'digits', 'examples', 'digit-000.png') },
        start_job: { model: target, items: { folder: '/nonexistent' }, results: '/nonexistent/rbac.jsonl' },
      };
      const result = await clients[role].callTool({ name: tool, arguments: args[tool] as Record<string, unknown> });
      if (!result.isError) return 'allowed';
      const text = (result.content as { text?: string }[])[0]?.text ?? '';
      return text.startsWith('FORBIDDEN') ? 'forbidden' : (text.split(':')[0] as string);
    }
    if (adapter === 'rest') {
      const [method, path] = rest as [string, string];
      const body =
        method === 'POST'
          ? path.endsWith('/infer')
            ? JSON.stringify({
                inputs: [
                  { name: 'a', shape: [1, 2], datatype: 'FP32', data: [1, 2] },
                  { name: 'b', shape: [1, 2], datatype: 'FP32', data: [3, 4] },
                ],
              })
            : path.endsWith('/register')
              ? JSON.stringify({ key: '/tg_rbac_absent', byte_size: 16 })
              : '{}'
          : undefined;
      const res = await fetch(`${served.base}${path}`, {
        method,
        headers: { authorization: `Bearer ${keys[role]}`, 'content-type': 'application/json' },
        ...(body ? { body } : {}),
      });
      const text = await res.text();
      if (res.status === 403) {
        assert.match(text, /FORBIDDEN/);
        return 'forbidden';
      }
      // Allowed, though the operation itself may fail for its own reasons (an absent region).
      return res.status === 401 ? 'unauthenticated' : 'allowed';
    }
    const [method, model] = rest as [string, string];
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${keys[role]}`);
    const request = method === 'ModelMetadata' ? { name: model } : { model_name: model };
    return new Promise((resolve) =>
      (grpcClient[method] as (r: unknown, m: grpc.Metadata, cb: (e: grpc.ServiceError | null) => void) => void).call(
        grpcClient,
        request,
        metadata,
        (err) =>
          resolve(!err ? 'allowed' : err.code === grpc.status.PERMISSION_DENIED ? 'forbidden' : `grpc ${err.code}`),
      ),
    );
  }

  for (const [op, expected] of Object.entries(EXPECTED))
    it(op, async () => {
      for (const role of ROLES) {
        const outcome = await attempt(op, role);
        if (expected[role]) assert.notEqual(outcome, 'forbidden', `${role} may: ${op}`);
        else assert.equal(outcome, 'forbidden', `${role} may not: ${op}`);
      }
    });

  it('lists only what the caller may read', async () => {
    const names = async (role: Role) =>
      (
        (await clients[role].callTool({ name: 'list_models', arguments: {} })).structuredContent as {
          models: { name: string }[];
        }
      ).models
        .map((m) => m.name)
        .sort();
    assert.deepEqual(await names('admin'), ['adder', 'digits', 'row_sum']);
    assert.deepEqual(await names('monitor'), ['adder', 'digits', 'row_sum']);
    assert.deepEqual(await names('adder-runner'), ['adder']);
    const workflows = async (role: Role) =>
      (
        (await clients[role].callTool({ name: 'list_workflows', arguments: {} })).structuredContent as {
          workflows: { name: string }[];
        }
      ).workflows.map((w) => w.name);
    assert.deepEqual(await workflows('monitor'), ['add_then_sum', 'add_twice']);
    // add_then_sum is listed (read on add*), though running it needs execute on row_sum too.
    assert.deepEqual(await workflows('adder-runner'), ['add_then_sum', 'add_twice']);
    const index = await fetch(`${served.base}/v2/repository/index`, {
      method: 'POST',
      headers: { authorization: `Bearer ${keys['adder-runner']}` },
      body: '{}',
    });
    assert.deepEqual(
      ((await index.json()) as { name: string }[]).map((m) => m.name),
      ['adder', 'add_then_sum', 'add_twice'],
      'models, then workflows',
    );
  });

  it('audits every denial with the caller, the object and the permission', () => {
    const denied = readFileSync(join(served.work, 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((e) => e.action === 'access_denied');
    assert.ok(
      denied.some((e) => e.target === 'model:adder' && e.permission === 'modify' && String(e.actor).startsWith('key:')),
    );
    assert.ok(denied.some((e) => e.target === 'server:metrics' && e.permission === 'read'));
  });

  it("audits the admin's loads on every surface, and an unload, with the key and the outcome", async () => {
    await clients.admin.callTool({ name: 'unload_model', arguments: { model: 'row_sum' } });
    const adminId = `key:${parseApiKey(keys.admin)?.id}`;
    const done = readFileSync(join(served.work, 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((e) => ['load_model', 'register_model', 'unload_model'].includes(e.action as string));
    // MCP load_model loads; OIP REST load and gRPC RepositoryModelLoad register the repository's
    // folder again, as Triton does: one entry each, by the admin.
    const loads = done.filter((e) => e.action === 'load_model');
    assert.equal(loads.length, 1, JSON.stringify(loads));
    assert.deepEqual([loads[0]?.actor, loads[0]?.target, loads[0]?.outcome], [adminId, 'model:adder@1', 'ok']);
    const registrations = done.filter((e) => e.action === 'register_model');
    assert.equal(registrations.length, 2, JSON.stringify(registrations));
    for (const e of registrations)
      assert.deepEqual([e.actor, e.target, e.outcome], [adminId, `dir:${join(served.work, 'models', 'adder')}`, 'ok']);
    assert.ok(done.some((e) => e.action === 'unload_model' && e.target === 'model:row_sum' && e.actor === adminId));
  });

  it('answers a denied name the same whether or not it exists', async () => {
    const ask = async (model: string) =>
      (
        (await clients['adder-runner'].callTool({ name: 'describe_model', arguments: { model } })).content as {
          text: string;
        }[]
      )[0]?.text;
    assert.match((await ask('row_sum')) ?? '', /^FORBIDDEN: /);
    assert.match((await ask('no-such-model')) ?? '', /^FORBIDDEN: /);
    // A name the role covers is looked up: an absent one is MODEL_NOT_FOUND.
    assert.match((await ask('addition-that-is-not-there')) ?? '', /^MODEL_NOT_FOUND: /);
  });
});
