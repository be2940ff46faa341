import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { renderWorkflows, type WorkflowsFile } from '../../bench/workflows/render.js';

/**
 * A smoke run of bench/workflows, short enough for CI: the real server, the demo vision pipeline
 * and the adder chain, run_workflow against the client-side chain over MCP, the result file and
 * its docs section. The figures themselves come from full runs (docs/benchmarks.md).
 */

const ROOT = join(import.meta.dirname, '..', '..');

describe('bench/workflows (smoke)', { timeout: 300_000 }, () => {
  it('measures each scenario both ways and renders the table', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-workflows-smoke-')), 'workflows.json');
    await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'bench/workflows/run.ts'), '--runs', '3', '--warmup', '1', '--out', out],
      { cwd: ROOT, timeout: 280_000 },
    );
    const file = JSON.parse(readFileSync(out, 'utf8')) as WorkflowsFile;
    assert.deepEqual(
      file.scenarios.map((s) => [s.name, s.stages]),
      [
        ['vision, object', 4],
        ['vision, none', 2],
        ['adder x8', 8],
      ],
    );
    for (const s of file.scenarios) {
      assert.equal(s.workflow_ms.n, 3);
      assert.ok(s.workflow_ms.p50 > 0 && s.chain_ms.p50 > 0);
      assert.ok(s.overhead_per_stage_ms.p50 >= 0 && s.overhead_per_stage_ms.p50 < s.workflow_ms.p50);
    }
    const section = renderWorkflows([file]);
    assert.match(section, /^## Workflows against the client-side chain/);
    assert.match(section, /\| adder x8 \| 8 \|/);
  });
});
