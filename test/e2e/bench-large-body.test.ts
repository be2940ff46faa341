import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { renderLargeBody } from '../../bench/large-body/render.js';
import type { LargeBodyResult } from '../../bench/large-body/results.js';

/**
 * A smoke run of bench/large-body, short enough for CI: the models built by make_models.py, the
 * two real gateways (as shipped and with V8's default heap accounting), the baselines, the result
 * file and its docs section. The figures themselves come from full runs (docs/benchmarks.md).
 */

const ROOT = join(import.meta.dirname, '..', '..');

describe('bench/large-body (smoke)', { timeout: 300_000 }, () => {
  it('measures every scenario on both gateways with CPU figures, and renders the table', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-large-body-smoke-')), 'large-body.json');
    const args = ['--calls', '16', '--rounds', '1', '--warmup', '3', '--concurrency', '4', '--wide', '8', '--out', out];
    await promisify(execFile)(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/large-body/run.ts'), ...args], {
      cwd: ROOT,
      timeout: 280_000,
    });
    const file = JSON.parse(readFileSync(out, 'utf8')) as LargeBodyResult;
    assert.equal(file.config.input_bytes, 3 * 224 * 224 * 4);
    assert.deepEqual(Object.keys(file.raw).sort(), ['channel-mean', 'half']);
    assert.deepEqual(
      file.scenarios.map((s) => `${s.gateway} ${s.name}`),
      ['shipped', 'v8-default'].flatMap((g) => [
        `${g} channel-mean/c1`,
        `${g} channel-mean/c4`,
        `${g} half/c1`,
        `${g} mcp-http-b64/c1`,
        `${g} mcp-http-path/c1`,
        ...(g === 'shipped'
          ? [
              `${g} half-shm/c1`,
              `${g} batched-binary/c8`,
              `${g} batched-shm/c8`,
              `${g} batched-mcp-path/c8`,
              `${g} channel-mean-dataplane/c1`,
              `${g} batched-binary-dataplane/c8`,
            ]
          : []),
      ]),
    );
    for (const s of file.scenarios) {
      assert.equal(s.latency.n, 16, `${s.gateway} ${s.name}`);
      // CPU times come from /proc in 10 ms ticks: 16 cheap calls may read 0, the whole run may not.
      assert.ok(s.calls_per_s > 0 && s.cpu_ms_per_call.gateway >= 0, `${s.gateway} ${s.name}`);
      assert.ok((s.cpu_ms_per_call.gateway_main ?? -1) >= 0, `main thread: ${s.gateway} ${s.name}`);
      assert.ok(s.gc && s.gc.ms_per_call >= 0 && s.gc.major_per_1000_calls >= 0, `GC figures: ${s.gateway} ${s.name}`);
    }
    const gatewayCpu = file.scenarios.reduce((sum, s) => sum + s.cpu_ms_per_call.gateway, 0);
    assert.ok(gatewayCpu > 0, 'the gateways used CPU over the run');
    // The workers are the fork server's children, not the gateway's: counted all the same.
    const workerCpu = file.scenarios.reduce((sum, s) => sum + s.cpu_ms_per_call.worker, 0);
    assert.ok(workerCpu > 0, "the workers' CPU over the run was not counted");
    const section = renderLargeBody([file]);
    assert.match(section, /^## Large bodies \(bench\/large-body\)/);
    assert.match(section, /\| `half\/c1` \| v8-default \|/);
    assert.match(section, /full GCs per 1000 calls/);
    assert.match(section, /\| `batched-shm\/c8` \| shipped \|/);
    assert.match(section, /\| `batched-binary-dataplane\/c8` \| shipped \|/);
    assert.match(section, /ceiling for image calls, from its main thread's CPU per call/);
  });
});
