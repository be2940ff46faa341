import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { ensureTestModels, ROOT } from '../helpers/models.js';

/**
 * Encryption at rest with real parts: the CLI encrypts a model folder, a real torch worker loads
 * it (decrypting in memory) and answers; a wrong key, a missing key and a changed file each fail
 * to load with an error that says which.
 */

const run = promisify(execFile);
const KEY = Buffer.alloc(32, 7).toString('base64');

async function tensorgate(work: string, args: string[], env: NodeJS.ProcessEnv) {
  const global = [
    '--models',
    join(work, 'models'),
    '--registry',
    join(work, 'r.db'),
    '--audit-log',
    join(work, 'audit.jsonl'),
  ];
  try {
    const { stdout, stderr } = await run(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'src/cli/main.ts'), ...global, ...args],
      {
        cwd: ROOT,
        env: { ...process.env, TENSORGATE_MODEL_KEY: '', ...env },
      },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe('models encrypted at rest', { timeout: 240_000 }, () => {
  let work: string;
  let model: string;
  let original: Buffer;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'tg-sealed-'));
    model = join(work, 'models', 'adder');
    cpSync(join(ensureTestModels(), 'adder'), model, { recursive: true });
    original = readFileSync(join(model, '1', 'model.pt'));
    const done = await tensorgate(work, ['encrypt-model', model], { TENSORGATE_MODEL_KEY: KEY });
    assert.equal(done.code, 0, done.stderr);
    assert.match(done.stdout, /adder@1: model\.pt\.tgenc \(AES-256-GCM, key id [0-9a-f]{16}\); plaintext removed/);
  });

  it('replaces the weights with an authenticated ciphertext and points config.json at it', () => {
    assert.ok(!existsSync(join(model, '1', 'model.pt')), 'the plaintext is gone');
    const sealed = readFileSync(join(model, '1', 'model.pt.tgenc'));
    assert.equal(sealed.subarray(0, 8).toString('ascii'), 'TGENC001');
    // No 64-byte stretch of the original survives in the file.
    for (let i = 0; i + 64 <= original.length; i += 4096)
      assert.equal(sealed.indexOf(original.subarray(i, i + 64)), -1, `plaintext bytes at ${i}`);
    const config = JSON.parse(readFileSync(join(model, 'config.json'), 'utf8'));
    assert.equal(config.versions['1'].file, 'model.pt.tgenc');
    assert.match(readFileSync(join(work, 'audit.jsonl'), 'utf8'), /"action":"encrypt_model","target":"model:adder@1"/);
  });

  it('loads and serves with the key, decrypting in the worker', async () => {
    const registered = await tensorgate(work, ['register', model], { TENSORGATE_MODEL_KEY: KEY });
    assert.equal(registered.code, 0, registered.stderr);
    const result = await tensorgate(work, ['infer', 'adder', '-i', 'a=[[1,2]]', '-i', 'b=[[10,20]]', '--json'], {
      TENSORGATE_MODEL_KEY: KEY,
    });
    assert.equal(result.code, 0, result.stderr);
    const out = JSON.parse(result.stdout) as { outputs: { summary: { values?: unknown } }[] };
    assert.deepEqual(out.outputs[0]?.summary.values, [[11, 22]]);
  });

  it('refuses to load without a key, with the wrong key, or once the file was changed', async () => {
    const noKey = await tensorgate(work, ['register', model], {});
    assert.notEqual(noKey.code, 0);
    assert.match(noKey.stderr, /LOAD_FAILED.*is encrypted \(key id [0-9a-f]{16}\) and no key is configured/);

    const wrongKey = await tensorgate(work, ['register', model], {
      TENSORGATE_MODEL_KEY: Buffer.alloc(32, 9).toString('hex'),
    });
    assert.notEqual(wrongKey.code, 0);
    assert.match(wrongKey.stderr, /was encrypted with key id [0-9a-f]{16}; the configured key is [0-9a-f]{16}/);

    const file = join(model, '1', 'model.pt.tgenc');
    const bytes = readFileSync(file);
    bytes[bytes.length - 100] = (bytes[bytes.length - 100] as number) ^ 1;
    writeFileSync(file, bytes);
    const tampered = await tensorgate(work, ['register', model], { TENSORGATE_MODEL_KEY: KEY });
    assert.notEqual(tampered.code, 0);
    assert.match(tampered.stderr, /failed authentication: the encrypted file was changed after it was written/);
  });
});
