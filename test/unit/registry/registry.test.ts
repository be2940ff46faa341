import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { defaultVersion, parseModelConfig } from '../../../src/registry/model-config.js';
import { Registry } from '../../../src/registry/registry.js';

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

test('the SQLite registry persists models, versions and load outcomes across reopen', () => {
  const path = join(mkdtempSync(join(tmpdir(), 'tg-reg-')), 'r.db');
  const cfg = parseModelConfig(raw, 'test');
  const first = new Registry(path);
  first.upsert('demo', '/models/demo', cfg);
  first.setVersionStatus('demo', '1', 'ready', { loadMs: 12.5, warmupMs: 3 });
  first.setVersionStatus('demo', '3', 'failed', { error: 'boom' });
  first.close();

  const second = new Registry(path);
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
  second.upsert('demo', '/models/demo', parseModelConfig({ ...raw, versions: { '1': raw.versions['1'] } }, 't'));
  assert.deepEqual(
    second.get('demo').versions.map((v) => [v.version, v.status]),
    [['1', 'registered']],
  );
  assert.throws(() => second.get('nope'), { code: 'MODEL_NOT_FOUND' });
  second.close();
});
