import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import type { TensorgateError } from '../../../src/errors.js';
import { defaultVersion, parseModelConfig } from '../../../src/registry/model-config.js';
import { Registry, type RegistryChange } from '../../../src/registry/registry.js';
import { SCHEMA_VERSION } from '../../../src/registry/sqlite-store.js';

const raw = {
  name: 'demo',
  inputs: [{ name: 'x', dtype: 'float32', shape: [-1, 4] }],
  outputs: [{ name: 'y', dtype: 'float32', shape: [-1, 2], labels: ['a', 'b'] }],
  versions: { '1': { format: 'torchscript', file: 'model.pt' }, '3': { format: 'torchscript', file: 'model.pt' } },
};

test('config defaults are filled in and the highest version is the default', () => {
  const cfg = parseModelConfig(raw, 'test');
  assert.equal(cfg.resources.device, 'cpu');
  assert.equal(cfg.resources.instances, 1);
  assert.deepEqual(cfg.parameters.precision, ['fp32']);
  assert.equal(defaultVersion(cfg), '3');
  assert.equal(defaultVersion(parseModelConfig({ ...raw, default_version: '1' }, 'test')), '1');
});

test('resources.cpus takes a CPU list or ids, sorted without repeats, and only for torch workers', () => {
  const cpus = (value: unknown) => parseModelConfig({ ...raw, resources: { cpus: value } }, 'c').resources.cpus;
  assert.equal(parseModelConfig(raw, 'c').resources.cpus, undefined);
  assert.deepEqual(cpus('1'), [1]);
  assert.deepEqual(cpus('0-3, 8'), [0, 1, 2, 3, 8]);
  assert.deepEqual(cpus('4,2-3,2'), [2, 3, 4]);
  assert.deepEqual(cpus([3, 1, 3]), [1, 3]);
  for (const [bad, why] of [
    ['', /CPU list such as/],
    ['1-', /CPU list such as/],
    ['a', /CPU list such as/],
    ['3-2', /runs backwards/],
    ['0-99999999', /CPU 1024; CPU ids go up to 1023/],
    [[], /at least one CPU/],
    [[-1], /resources\.cpus/],
    [[1.5], /resources\.cpus/],
  ] as const)
    assert.throws(() => cpus(bad), why, String(bad));
  // torch's threads need a CPU each, of what the instance gets.
  const resources = (r: Record<string, unknown>) => parseModelConfig({ ...raw, resources: r }, 'c').resources;
  assert.equal(resources({ cpus: '0-3', threads: 2, instances: 2 }).threads, 2);
  assert.equal(resources({ cpus: '0-1', threads: 2, instances: 3 }).threads, 2); // all share both
  assert.throws(
    () => resources({ cpus: '0-2', threads: 2, instances: 2 }),
    /2 threads on the 1 CPU each instance gets from resources\.cpus would wait on each other: set threads to at most 1/,
  );
  assert.throws(() => resources({ cpus: [4], threads: 4 }), /4 threads on the 1 CPU of resources\.cpus/);
  const onnx = { ...raw, engine: 'onnx', versions: { '1': { format: 'onnx', file: 'model.onnx' } } };
  assert.throws(
    () => parseModelConfig({ ...onnx, resources: { cpus: '1' } }, 'c'),
    /resources\.cpus places torch workers; the onnx engine runs in the gateway process/,
  );
});

test('resources.pipeline is a boolean, unset by default, and only for torch workers', () => {
  const resources = (r: Record<string, unknown>) => parseModelConfig({ ...raw, resources: r }, 'c').resources;
  assert.equal(resources({}).pipeline, undefined); // the worker picks by device
  assert.equal(resources({ pipeline: true }).pipeline, true);
  assert.equal(resources({ pipeline: false }).pipeline, false);
  assert.throws(() => resources({ pipeline: 'yes' }), /resources\.pipeline/);
  const onnx = { ...raw, engine: 'onnx', versions: { '1': { format: 'onnx', file: 'model.onnx' } } };
  assert.throws(
    () => parseModelConfig({ ...onnx, resources: { pipeline: true } }, 'c'),
    /resources\.pipeline is a torch worker's; the onnx engine runs in the gateway process/,
  );
});

test('an invalid config lists every problem in one INVALID_CONFIG error', () => {
  const bad = {
    ...raw,
    name: 'Bad Name',
    inputs: [{ name: 'x', dtype: 'complex64', shape: [-1] }],
    versions: { '1': { format: 'eager', file: 'w.pt' } },
  };
  assert.throws(
    () => parseModelConfig(bad, 'cfg.json'),
    (err: Error & { code?: string; data?: { issues: string[] } }) => {
      assert.equal(err.code, 'INVALID_CONFIG');
      assert.match(err.message, /^cfg\.json is not a valid model config/);
      for (const part of ['name', 'inputs.0.dtype', 'entry']) assert.match(err.message, new RegExp(part));
      return true;
    },
  );
  for (const file of ['../other/model.pt', '/etc/passwd', 'sub/../../model.pt', '..\\model.pt'])
    assert.throws(
      () => parseModelConfig({ ...raw, versions: { '1': { format: 'torchscript', file } } }, 'cfg.json'),
      /versions\.1\.file.*inside the version folder/,
      file,
    );
  assert.deepEqual(
    parseModelConfig({ ...raw, versions: { '1': { format: 'torchscript', file: 'weights/model.pt' } } }, 'c').versions[
      '1'
    ],
    { format: 'torchscript', file: 'weights/model.pt' },
  );
  // Cross-field checks run once each field is valid on its own.
  assert.throws(() => parseModelConfig({ ...raw, default_version: '7' }, 'cfg.json'), /default_version "7"/);
  assert.throws(
    () => parseModelConfig({ ...raw, outputs: [...raw.outputs, ...raw.outputs] }, 'cfg.json'),
    /duplicate output name "y"/,
  );
});

test('the SQLite registry persists models, versions and load outcomes across reopen', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'tg-reg-')), 'r.db');
  const cfg = parseModelConfig(raw, 'test');
  const first = await Registry.open(path);
  await first.upsert('demo', '/models/demo', cfg);
  await first.setVersionStatus('demo', '1', 'ready', { loadMs: 12.5, warmupMs: 3 });
  await first.setVersionStatus('demo', '3', 'failed', { error: 'boom' });
  await first.close();

  const second = await Registry.open(path);
  const record = second.get('demo');
  assert.equal(record.dir, '/models/demo');
  assert.deepEqual(
    record.versions.map((v) => [v.version, v.status, v.loadMs, v.error]),
    [
      ['1', 'ready', 12.5, null],
      ['3', 'failed', null, 'boom'],
    ],
  );
  // Re-registering with fewer versions drops the missing ones and resets the rest.
  await second.upsert('demo', '/models/demo', parseModelConfig({ ...raw, versions: { '1': raw.versions['1'] } }, 't'));
  await second.refresh();
  assert.deepEqual(
    second.get('demo').versions.map((v) => [v.version, v.status]),
    [['1', 'registered']],
  );
  assert.throws(() => second.get('nope'), { code: 'MODEL_NOT_FOUND' });
  await second.close();
});

test('a registration refuses to overwrite one made elsewhere since it last looked; a start-up sync never does', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'tg-reg-')), 'r.db');
  const cfg = parseModelConfig(raw, 'test');
  const a = await Registry.open(path, { replica: 'a' });
  const b = await Registry.open(path, { replica: 'b' });
  assert.equal((await a.upsert('demo', '/models/one', cfg)).revision, 1);
  // b has not seen a's registration: replacing would silently undo it.
  await assert.rejects(b.upsert('demo', '/models/two', cfg), (err: TensorgateError) => {
    assert.equal(err.code, 'REGISTRATION_CONFLICT');
    assert.match(err.message, /model "demo" was registered again by replica a at .* while this registration ran/);
    return true;
  });
  // Once b's view is current, its registration goes through and raises the revision.
  await b.refresh();
  const second = await b.upsert('demo', '/models/two', cfg);
  assert.deepEqual([second.revision, second.dir, second.registeredBy], [2, '/models/two', 'b']);
  // A sync with what is stored writes nothing; one with a different folder writes, whatever the view.
  assert.equal((await b.upsert('demo', '/models/two', cfg, 'sync')).revision, 2);
  assert.equal((await a.upsert('demo', '/models/three', cfg, 'sync')).revision, 3);
  await Promise.all([a.close(), b.close()]);
});

test('a registry watching the file sees what another process registered', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'tg-reg-')), 'r.db');
  const server = await Registry.open(path);
  const cli = await Registry.open(path);
  const changes: RegistryChange[] = [];
  server.onChange((change) => changes.push(change));
  server.watch();
  await cli.upsert('demo', '/models/demo', parseModelConfig(raw, 'test'));
  await cli.upsertWorkflow('flow', '/models/flow', { name: 'flow' });
  const deadline = Date.now() + 5000;
  while (!server.has('demo') && Date.now() < deadline) await sleep(50);
  assert.equal(server.get('demo').dir, '/models/demo');
  assert.deepEqual(changes.at(-1), { models: ['demo'], removed: [], workflows: ['flow'] });
  // Load outcomes written by the other process change no registration: no new event.
  const events = changes.length;
  await cli.setVersionStatus('demo', '1', 'ready');
  await sleep(1300);
  assert.equal(changes.length, events);
  await Promise.all([server.close(), cli.close()]);
});

test('a registry file from before migrations is brought up to date, its models kept', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'tg-reg-')), 'r.db');
  const db = new Database(path);
  db.exec(`CREATE TABLE models (name TEXT PRIMARY KEY, dir TEXT NOT NULL, config TEXT NOT NULL, registered_at TEXT NOT NULL);
    CREATE TABLE versions (model TEXT NOT NULL REFERENCES models(name) ON DELETE CASCADE, version TEXT NOT NULL,
      status TEXT NOT NULL, error TEXT, load_ms REAL, warmup_ms REAL, updated_at TEXT NOT NULL, PRIMARY KEY (model, version));
    CREATE TABLE workflows (name TEXT PRIMARY KEY, dir TEXT NOT NULL, definition TEXT NOT NULL, registered_at TEXT NOT NULL);`);
  db.prepare('INSERT INTO models VALUES (?, ?, ?, ?)').run('demo', '/m/demo', JSON.stringify(raw), 'then');
  db.prepare("INSERT INTO versions VALUES ('demo', '1', 'ready', NULL, 5, 1, 'then')").run();
  db.close();
  const registry = await Registry.open(path);
  const record = registry.get('demo');
  assert.deepEqual([record.revision, record.registeredBy, record.versions[0]?.status], [1, null, 'ready']);
  await registry.close();
  const reopened = new Database(path, { readonly: true });
  assert.equal(reopened.pragma('user_version', { simple: true }), SCHEMA_VERSION, 'every migration applied');
  assert.ok(reopened.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'jobs'").get());
  reopened.close();
});

test('onnx versions need engine onnx, fp32 and no bfloat16; the reasons are named', () => {
  const onnx = { format: 'onnx', file: 'model.onnx' };
  assert.throws(
    () => parseModelConfig({ ...raw, versions: { '1': onnx } }, 'cfg.json'),
    /versions\.1\.format: format "onnx" runs on the in-process ONNX Runtime: set "engine": "onnx"/,
  );
  assert.throws(
    () => parseModelConfig({ ...raw, engine: 'onnx' }, 'cfg.json'),
    /versions\.1\.format: versions of an onnx model have format "onnx"/,
  );
  assert.throws(
    () =>
      parseModelConfig(
        {
          ...raw,
          engine: 'onnx',
          versions: { '1': onnx },
          parameters: { precision: ['fp16'] },
          inputs: [{ name: 'x', dtype: 'bfloat16', shape: [-1, 4] }],
        },
        'cfg.json',
      ),
    (err: TensorgateError) =>
      /parameters\.precision: the onnx engine runs the graph as exported: only fp32/.test(err.message) &&
      /inputs\.0\.dtype: ONNX Runtime for Node has no bfloat16 tensors/.test(err.message),
  );
  assert.equal(parseModelConfig({ ...raw, engine: 'onnx', versions: { '1': onnx } }, 'cfg.json').engine, 'onnx');
});
