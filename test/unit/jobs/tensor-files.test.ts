import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { openResultsFile } from '../../../src/jobs/items.js';
import { outputRowsOf, rowsOfItems, TensorFiles, tensorPath } from '../../../src/jobs/tensor-files.js';
import { decodeNpy } from '../../../src/tensor/npy.js';
import { makeTensor } from '../../../src/tensor/tensor.js';

/**
 * A job's .npy output files: a valid array of the committed rows after every append, its header
 * rewritten in place at a fixed length, cut back to the recorded rows when a job resumes.
 * test/e2e/jobs.test.ts loads them with numpy after real jobs, a server killed mid-job included.
 */

const outputs = outputRowsOf('model "m"', [
  { name: 'emb', dtype: 'float32', shape: [-1, 2, 3] },
  { name: 'ids', dtype: 'int64', shape: [-1] },
]);

function tensors(first: number, count: number) {
  const emb = Float32Array.from({ length: count * 6 }, (_, i) => first * 6 + i);
  const ids = BigInt64Array.from({ length: count }, (_, i) => BigInt(first + i));
  return [
    { name: 'emb', tensor: makeTensor('float32', [count, 2, 3], new Uint8Array(emb.buffer)) },
    { name: 'ids', tensor: makeTensor('int64', [count], new Uint8Array(ids.buffer)) },
  ];
}

/** The files are opened as a job opens them: through their folder, under the allowed roots. */
const open = (path: string, how: 'create' | 'update') => openResultsFile(path, [tmpdir()], how, 'tensors');

describe('a job writing its outputs as .npy files', () => {
  it('is a valid array of what was appended at every step; a resume cuts it back to the commit', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-tensor-files-'));
    const results = join(dir, 'out.jsonl');
    const files = new TensorFiles(outputs, results, 100_000, 0, true, open);
    const emb = tensorPath(results, 'emb');
    assert.equal(emb, join(dir, 'out.emb.npy'));
    assert.deepEqual(decodeNpy(readFileSync(emb)).shape, [0, 2, 3]);
    const headerBytes = statSync(emb).size;

    files.append(0, rowsOfItems(outputs, tensors(0, 3), 3));
    files.append(3, [undefined, ...rowsOfItems(outputs, tensors(4, 1), 1)]); // item 3 failed
    files.close();
    const written = decodeNpy(readFileSync(emb));
    assert.deepEqual(written.shape, [5, 2, 3]);
    const values = new Float32Array(new Uint8Array(written.data).buffer);
    assert.deepEqual(
      [...values.slice(0, 18)],
      Array.from({ length: 18 }, (_, i) => i),
    );
    assert.ok(values.slice(18, 24).every(Number.isNaN), 'a failed item is a row of NaN');
    assert.deepEqual([...values.slice(24)], [24, 25, 26, 27, 28, 29]);
    const ids = decodeNpy(readFileSync(tensorPath(results, 'ids')));
    assert.deepEqual([...new BigInt64Array(new Uint8Array(ids.data).buffer)], [0n, 1n, 2n, 0n, 4n]);
    assert.equal(statSync(emb).size, headerBytes + 5 * 24, 'the header kept its length');

    // Resumed with 3 rows recorded: the rows written after that commit go.
    new TensorFiles(outputs, results, 100_000, 3, false, open).close();
    assert.deepEqual(decodeNpy(readFileSync(emb)).shape, [3, 2, 3]);
    assert.deepEqual(decodeNpy(readFileSync(tensorPath(results, 'ids'))).shape, [3]);
  });

  it('refuses outputs whose rows cannot be stacked, and answers of another shape', () => {
    assert.throws(
      () => outputRowsOf('model "m"', [{ name: 'boxes', dtype: 'float32', shape: [-1, -1, 4] }]),
      /^TensorgateError: tensors: model "m"'s output "boxes" has shape \[-1, -1, 4\]: its rows vary in shape/,
    );
    assert.throws(
      () => outputRowsOf('model "m"', [{ name: 'h', dtype: 'bfloat16', shape: [-1, 8] }]),
      /is bfloat16, which numpy has no dtype for/,
    );
    const wrong = [{ name: 'emb', tensor: makeTensor('float32', [1, 3, 2], new Uint8Array(24)) }];
    assert.throws(() => rowsOfItems(outputs.slice(0, 1), wrong, 1), /came back float32\[1, 3, 2\] for 1 items/);
  });

  it('pads a header to the length its largest row count needs', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-tensor-files-'));
    const results = join(dir, 'r.csv');
    writeFileSync(join(dir, 'r.emb.npy'), 'stale bytes from an earlier job');
    new TensorFiles(outputs.slice(0, 1), results, 10 ** 12, 0, true, open).close();
    const path = join(dir, 'r.emb.npy');
    assert.deepEqual(decodeNpy(readFileSync(path)).shape, [0, 2, 3]);
    assert.equal(statSync(path).size % 64, 0);
  });
});
