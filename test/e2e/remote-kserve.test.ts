import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort, waitHealthy } from '../../bench/peers/harness.js';
import { type Connected, connect } from '../helpers/mcp.js';
import { ensureTestModels, ROOT } from '../helpers/models.js';

/**
 * The remote engine against the KServe model server (PyPI `kserve`, in .tensorgate/kserve) serving
 * the tabular demo model over OIP v2: tensorgate serves the same TorchScript file locally and as a
 * remote model, and both must answer alike, through batching; a stopped KServe answers
 * REMOTE_UNAVAILABLE without a hang.
 */

const KSERVE_PYTHON = join(ROOT, '.tensorgate', 'kserve', 'bin', 'python');

let kserve: ChildProcess;
let kserveBase: string;
let front: Connected;

before(async () => {
  assert.ok(existsSync(KSERVE_PYTHON), 'KServe is missing: run bash scripts/install-python-clients.sh');
  const models = ensureTestModels();
  const port = await freePort();
  kserve = spawn(
    KSERVE_PYTHON,
    [
      join(ROOT, 'bench/oip/kserve_server.py'),
      '--model-dir',
      join(models, 'tabular-classifier'),
      '--port',
      String(port),
    ],
    { stdio: 'ignore' },
  );
  kserveBase = `http://127.0.0.1:${port}`;
  await waitHealthy(kserveBase, '/v2/models/tabular-classifier/ready', 60_000);

  const repo = mkdtempSync(join(tmpdir(), 'tg-remote-kserve-'));
  symlinkSync(join(models, 'tabular-classifier'), join(repo, 'tabular-classifier'));
  const local = JSON.parse(readFileSync(join(models, 'tabular-classifier', 'config.json'), 'utf8'));
  mkdirSync(join(repo, 'kserve-tabular'));
  writeFileSync(
    join(repo, 'kserve-tabular', 'config.json'),
    JSON.stringify({
      name: 'kserve-tabular',
      description: 'The tabular demo model, served by KServe',
      engine: 'remote',
      inputs: local.inputs,
      outputs: local.outputs,
      remote: { url: kserveBase, model: 'tabular-classifier', timeout_ms: 5000, retries: 1, backoff_ms: 20 },
      batching: { max_batch_size: 16, max_queue_delay_us: 20_000, adaptive_delay: false },
      versions: { '1': { format: 'remote' } },
    }),
  );
  front = await connect('http', 120_000, [], repo);
});

after(async () => {
  await front?.close();
  kserve?.kill('SIGKILL');
});

interface Inferred {
  batch_size: number;
  outputs: { name: string; uri: string; summary: { top?: { top: { label: string; score: number }[] }[] } }[];
}

async function infer(model: string, features: number[][]): Promise<Inferred> {
  const result = await front.client.callTool({ name: 'infer', arguments: { model, inputs: { features } } });
  if (result.isError) throw new Error((result.content as { text: string }[])[0]?.text);
  return result.structuredContent as Inferred;
}

/** The full output tensor, read through its tensor:// handle as .npy, as float32 values. */
async function values(r: Inferred): Promise<number[]> {
  const read = await front.client.readResource({ uri: r.outputs[0]?.uri as string });
  const blob = (read.contents[0] as { blob: string }).blob;
  const bytes = Buffer.from(blob, 'base64');
  const headerLength = bytes.readUInt16LE(8);
  const data = bytes.subarray(10 + headerLength);
  return Array.from(new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength)));
}

describe('remote engine against the KServe model server', () => {
  it('answers as the same model run locally, one call and batched', async () => {
    const rows = [
      [5.1, 3.5, 1.4, 0.2],
      [6.7, 3.0, 5.2, 2.3],
      [5.9, 2.8, 4.3, 1.3],
    ];
    const remote = await infer('kserve-tabular', rows);
    const local = await infer('tabular-classifier', rows);
    const [r, l] = [await values(remote), await values(local)];
    assert.equal(r.length, 9);
    for (const [i, v] of r.entries()) assert.ok(Math.abs(v - (l[i] as number)) < 1e-6, `element ${i}: ${v} vs ${l[i]}`);
    assert.deepEqual(
      remote.outputs[0]?.summary.top?.map((row) => row.top[0]?.label),
      ['setosa', 'virginica', 'versicolor'],
    );

    // Concurrent one-row calls are batched on the way to KServe, and each gets its own row back.
    const many = await Promise.all(rows.flatMap((row) => [row, row, row]).map((row) => infer('kserve-tabular', [row])));
    assert.ok(Math.max(...many.map((m) => m.batch_size)) > 1, 'some calls shared a request to KServe');
    for (const [i, m] of many.entries()) {
      const expected = l.slice(Math.floor(i / 3) * 3, Math.floor(i / 3) * 3 + 3);
      const got = await values(m);
      for (const [j, v] of got.entries()) assert.ok(Math.abs(v - (expected[j] as number)) < 1e-6);
    }
  });

  it('answers REMOTE_UNAVAILABLE once KServe is gone, without hanging, and keeps serving locally', async () => {
    kserve.kill('SIGKILL');
    await new Promise((r) => kserve.once('exit', r));
    const start = performance.now();
    await assert.rejects(infer('kserve-tabular', [[5.1, 3.5, 1.4, 0.2]]), /^Error: REMOTE_UNAVAILABLE: .*unreachable/);
    assert.ok(performance.now() - start < 5000);
    await infer('tabular-classifier', [[5.1, 3.5, 1.4, 0.2]]);
  });
});
