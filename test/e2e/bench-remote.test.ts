import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { type RemoteFile, renderRemote } from '../../bench/remote/render.js';

/**
 * A smoke run of bench/remote, short enough for CI: KServe serving both demo models, tensorgate's
 * remote models in front of it, the same binary requests both ways, the result file and its docs
 * section. The figures come from full runs (docs/benchmarks.md).
 */

const ROOT = join(import.meta.dirname, '..', '..');

describe('bench/remote (smoke)', { timeout: 300_000 }, () => {
  it('measures KServe directly and through tensorgate for each model, and renders the table', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-remote-smoke-')), 'remote.json');
    await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'bench/remote/run.ts'), '--requests', '5', '--image-requests', '2', '--out', out],
      { cwd: ROOT, timeout: 280_000 },
    );
    const file = JSON.parse(readFileSync(out, 'utf8')) as RemoteFile;
    assert.deepEqual(
      file.rows.map((r) => [r.model, r.requests, r.input_bytes]),
      [
        ['tabular-classifier', 5, 16],
        ['image-classifier', 2, 602112],
      ],
    );
    for (const r of file.rows) assert.ok(r.direct_ms.p50 > 0 && r.via_tensorgate_ms.p50 > 0);
    assert.match(renderRemote([file]), /^## Remote engine overhead \(bench\/remote\)/);
  });
});
