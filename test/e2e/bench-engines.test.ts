import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { type EnginesFile, renderEngines } from '../../bench/engines/render.js';

/**
 * A smoke run of bench/engines, short enough for CI: both demo models exported to ONNX, served by
 * the torch and onnx engines, over HTTP and in-process, at both concurrencies, compared, rendered.
 * The figures come from full runs (docs/benchmarks.md).
 */

const ROOT = join(import.meta.dirname, '..', '..');

describe('bench/engines (smoke)', { timeout: 300_000 }, () => {
  it('measures both engines on both models and renders the tables', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-engines-smoke-')), 'engines.json');
    await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'bench/engines/run.ts'), '--ms', '300', '--rounds', '1', '--out', out],
      { cwd: ROOT, timeout: 280_000 },
    );
    const file = JSON.parse(readFileSync(out, 'utf8')) as EnginesFile;
    const combinations = ['http', 'in-process'].flatMap((surface) =>
      ['tabular-classifier', 'image-classifier'].flatMap((model) =>
        [1, 16].flatMap((c) => ['torch', 'onnx'].map((engine) => [surface, model, engine, c])),
      ),
    );
    assert.deepEqual(
      file.blocks.map((b) => [b.surface, b.model, b.engine, b.concurrency]),
      combinations,
    );
    // A smoke window is shorter than an image batch at concurrency 16 may take on a busy host, so
    // only the small model's blocks are sure to have finished requests in them.
    for (const b of file.blocks.filter((b) => b.model === 'tabular-classifier'))
      assert.ok(b.throughput > 0 && (b.latency_ms.p50 ?? 0) > 0, JSON.stringify(b));
    // The export is the same function: the engines agree to float32 rounding.
    for (const a of file.accuracy) {
      assert.ok(a.max_abs_diff < 1e-3, `${a.model}: ${a.max_abs_diff}`);
      assert.equal(a.argmax_agree, a.rows);
    }
    assert.match(renderEngines([file]), /^## Engines: torch and onnx \(bench\/engines\)/);
  });
});
