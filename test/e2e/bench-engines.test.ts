import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { type EnginesFile, renderEngines } from '../../bench/engines/render.js';

/**
 * A smoke run of bench/engines, short enough for CI: both demo models registered with their ONNX
 * export, every variant (eager fp32, the .pt2 program, torch.compile, AOTInductor, bf16, int8,
 * onnx) picked by request parameters, over HTTP and in-process, at both concurrencies, compared,
 * rendered. The figures come from full runs (docs/benchmarks.md).
 */

const ROOT = join(import.meta.dirname, '..', '..');
const VARIANTS = [
  'torch-fp32',
  'torch-fp32-export',
  'torch-fp32-compile',
  'torch-fp32-aoti',
  'torch-bf16',
  'torch-int8',
  'onnx-fp32',
];
/** The variants that compute the same function as eager fp32: fp32 rounding apart. */
const SAME = ['torch-fp32-export', 'torch-fp32-compile', 'torch-fp32-aoti', 'onnx-fp32'];

describe('bench/engines (smoke)', { timeout: 900_000 }, () => {
  it('measures every variant on both models and renders the tables', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-engines-smoke-')), 'engines.json');
    await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'bench/engines/run.ts'), '--ms', '300', '--rounds', '1', '--out', out],
      { cwd: ROOT, timeout: 880_000 },
    );
    const file = JSON.parse(readFileSync(out, 'utf8')) as EnginesFile;
    const combinations = ['http', 'in-process'].flatMap((surface) =>
      ['tabular-classifier', 'image-classifier'].flatMap((model) =>
        [1, 16].flatMap((c) => VARIANTS.map((variant) => [surface, model, variant, c])),
      ),
    );
    assert.deepEqual(
      file.blocks.map((b) => [b.surface, b.model, b.variant, b.concurrency]),
      combinations,
    );
    // A smoke window is shorter than an image batch at concurrency 16 may take on a busy host, so
    // only the small model's blocks are sure to have finished requests in them.
    for (const b of file.blocks.filter((b) => b.model === 'tabular-classifier'))
      assert.ok(b.throughput > 0 && (b.latency_ms.p50 ?? 0) > 0, JSON.stringify(b));
    for (const a of file.accuracy.filter((a) => SAME.includes(a.variant))) {
      assert.ok(a.max_abs_diff < 1e-3, `${a.model} ${a.variant}: ${a.max_abs_diff}`);
      assert.equal(a.argmax_agree, a.rows);
    }
    // Lower precisions differ, a little, and were measured against the same baseline.
    assert.deepEqual(
      file.accuracy.map((a) => `${a.model} ${a.variant}`).sort(),
      ['tabular-classifier', 'image-classifier'].flatMap((m) => VARIANTS.slice(1).map((v) => `${m} ${v}`)).sort(),
    );
    assert.ok(file.variants.some((v) => v.engine === 'onnx' && v.state === 'ready'));
    for (const how of ['torch.compile', 'AOTInductor'])
      for (const model of ['tabular-classifier', 'image-classifier'])
        assert.ok(
          file.variants.some((v) => v.model.startsWith(model) && v.method.startsWith(how) && v.state === 'ready'),
          `${model}: ${how} serves fp32`,
        );
    assert.match(renderEngines([file]), /^## Variants and engines \(bench\/engines\)/);
  });
});
