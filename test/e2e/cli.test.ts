import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cpSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { waitForUrl } from '../helpers/mcp.js';
import { ensureTestModels, ROOT } from '../helpers/models.js';

/** The `tensorgate` command line as a user runs it: register, models, infer, with real workers. */

const run = promisify(execFile);
const CLI = join(ROOT, 'bin', 'tensorgate.js');

describe('tensorgate CLI', { timeout: 300_000 }, () => {
  let models: string;
  let global: string[];

  before(() => {
    models = ensureTestModels();
    const work = mkdtempSync(join(tmpdir(), 'tg-cli-'));
    global = ['--registry', join(work, 'registry.db'), '--models', join(work, 'empty'), '--allow-root', ROOT];
  });

  const tg = (...args: string[]) => run(process.execPath, [CLI, ...global, ...args], { cwd: ROOT });

  it('prints help that names every command', async () => {
    const { stdout } = await tg('--help');
    for (const command of ['serve', 'register', 'models', 'infer'])
      assert.match(stdout, new RegExp(`\\b${command}\\b`));
  });

  it('registers a model after loading and warming it, and lists it', async () => {
    const { stdout, stderr } = await tg('register', join(models, 'tabular-classifier'));
    assert.match(stdout, /^tabular-classifier@1: ready \(load [\d.]+ ms, warm-up [\d.]+ ms on cpu\)$/m);
    assert.match(stderr, /loading tabular-classifier@1/, 'progress goes to stderr');
    const listed = await tg('models');
    assert.match(listed.stdout, /tabular-classifier\s+v1\* ready/);
    const json = JSON.parse((await tg('models', '--json')).stdout) as { name: string }[];
    assert.deepEqual(
      json.map((m) => m.name),
      ['tabular-classifier'],
    );
  });

  it('runs a registered model once and prints the labelled result and stage timings', async () => {
    const { stdout } = await tg('infer', 'tabular-classifier', '-i', 'features=[[5.0,3.4,1.5,0.2]]');
    assert.match(stdout, /^probabilities float32\[1,3\]: top-1 \w+/m);
    assert.match(stdout, /timings ms: total [\d.]+ \(decode [\d.]+, queue [\d.]+, transfer [\d.]+, compute [\d.]+/);
    const { stdout: json } = await tg('infer', 'tabular-classifier', '-i', 'features=[[5.0,3.4,1.5,0.2]]', '--json');
    assert.deepEqual(JSON.parse(json).outputs[0].shape, [1, 3]);
  });

  it('loads and unloads models in a running server', async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-cli-serve-'));
    cpSync(join(models, 'adder'), join(work, 'models', 'adder'), { recursive: true });
    const server = spawn(
      process.execPath,
      [CLI, '--models', join(work, 'models'), '--registry', join(work, 'r.db'), 'serve', '--http', '0'],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    try {
      const url = await waitForUrl(server);
      const unloaded = await tg('unload', 'adder', '--url', url);
      assert.match(unloaded.stdout, /^adder: v1 unloaded$/m);
      const loaded = await tg('load', 'adder', '--url', url);
      assert.match(loaded.stdout, /^adder: v1 ready$/m);
      await assert.rejects(tg('load', 'adder', '--version', '5', '--url', url), (err: Error & { stderr?: string }) => {
        assert.match(err.stderr ?? '', /tensorgate: VERSION_NOT_FOUND/);
        return true;
      });
    } finally {
      server.kill('SIGTERM');
    }
    await assert.rejects(tg('load', 'adder', '--url', 'http://127.0.0.1:9/mcp'), /cannot reach a tensorgate server/);
  });

  it('serves the OIP data port beside HTTP, and refuses it where no HTTP server runs', async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-cli-data-'));
    cpSync(join(models, 'adder'), join(work, 'models', 'adder'), { recursive: true });
    const server = spawn(
      process.execPath,
      [CLI, '--models', join(work, 'models'), '--registry', join(work, 'r.db')].concat([
        'serve',
        '--http',
        '0',
        '--oip-port',
        '0',
        '--oip-threads',
        '2',
      ]),
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let log = '';
    server.stderr.on('data', (chunk: Buffer) => {
      log += chunk.toString();
    });
    try {
      await waitForUrl(server);
      const data = /OIP v2 data plane at (http:\/\/[\d.]+:\d+)\/v2 \(2 threads\)/.exec(log)?.[1];
      assert.ok(data, log);
      let ready = 0;
      for (let i = 0; i < 200 && ready !== 200; i++) {
        ready = (await fetch(`${data}/v2/models/adder/ready`)).status;
        if (ready !== 200) await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(ready, 200);
      const infer = await fetch(`${data}/v2/models/adder/infer`, {
        method: 'POST',
        body: JSON.stringify({
          inputs: [
            { name: 'a', datatype: 'FP32', shape: [1, 2], data: [1, 2] },
            { name: 'b', datatype: 'FP32', shape: [1, 2], data: [10, 20] },
          ],
        }),
      });
      const answer = (await infer.json()) as { outputs: { data: number[] }[] };
      assert.equal(infer.status, 200, JSON.stringify(answer));
      assert.deepEqual(answer.outputs[0]?.data, [11, 22]);
    } finally {
      server.kill('SIGTERM');
    }
    for (const args of [
      ['serve', '--stdio', '--oip-port', '0'],
      ['serve', '--http', '0', '--oip-threads', '2'],
    ])
      await assert.rejects(tg(...args), (err: Error & { stderr?: string }) => {
        assert.match(err.stderr ?? '', /tensorgate: INVALID_CONFIG: --oip-/);
        return true;
      });
  });

  it('fails with the error code and a non-zero status on bad input', async () => {
    await assert.rejects(
      tg('infer', 'tabular-classifier', '-i', 'features=[[1,2,3]]'),
      (err: Error & { code?: number; stderr?: string }) => {
        assert.equal(err.code, 1);
        assert.match(err.stderr ?? '', /tensorgate: SHAPE_MISMATCH: input "features"/);
        return true;
      },
    );
    await assert.rejects(tg('register', join(models, 'nope')), (err: Error & { stderr?: string }) => {
      assert.match(err.stderr ?? '', /INVALID_CONFIG: .*config\.json/);
      return true;
    });
  });
});
