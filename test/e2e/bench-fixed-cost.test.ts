import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { findPlacement } from '../../bench/fixed-cost/placement.js';
import { renderFixedCost } from '../../bench/fixed-cost/render.js';
import { renderFixedCostAb } from '../../bench/fixed-cost/render-ab.js';
import type { FixedCostAbResult, FixedCostResult } from '../../bench/fixed-cost/results.js';

/**
 * A smoke run of bench/fixed-cost, short enough for CI: the real servers (HTTP and stdio), the
 * spinning and the plain worker, the SDK's echo server, the bare JSON-RPC echo and the architecture
 * floor's HTTP server with its Python hop, the result file and its docs section. The figures themselves come from full runs (docs/benchmarks.md).
 */

const ROOT = join(import.meta.dirname, '..', '..');

describe('bench/fixed-cost (smoke)', { timeout: 300_000 }, () => {
  it('measures every scenario with its stages and CPU, and renders the tables', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-fixed-cost-smoke-')), 'fixed-cost.json');
    const args = ['--calls', '20', '--rounds', '1', '--warmup', '5', '--out', out];
    await promisify(execFile)(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/fixed-cost/run.ts'), ...args], {
      cwd: ROOT,
      timeout: 280_000,
    });
    const file = JSON.parse(readFileSync(out, 'utf8')) as FixedCostResult;
    const names = file.scenarios.map((s) => s.name);
    // The placed scenarios need two CPUs and taskset; where they are missing the file says why.
    const placement = findPlacement();
    const placed = typeof placement !== 'string';
    assert.deepEqual(
      file.config.placement,
      placed ? { gateway: placement.gateway, worker: placement.worker } : { none: placement },
    );
    assert.deepEqual(names, [
      'raw',
      'raw/direct', // the project's torch runs an exported program's guards in its graph
      ...(placed ? ['raw@placed'] : []),
      'oip/binary',
      'oip/binary+spin',
      'stdio/path',
      'stdio/path+spin',
      'http/path',
      'http-2026/path',
      'http/list_models',
      'stdio/list_models',
      'sdk-echo/path',
      'echo/path',
      ...(placed ? ['oip/binary@placed', 'stdio/path@placed'] : []),
      'floor/http',
      'floor/hop',
      'floor/hop+spin',
    ]);
    for (const s of file.scenarios) assert.equal(s.latency.n, 20, s.name);
    // The tensorgate inference scenarios carry the server's own stage timings and CPU figures.
    const inference = ['oip/binary', 'oip/binary+spin', 'stdio/path', 'http/path'];
    for (const name of [...inference, ...(placed ? ['oip/binary@placed', 'stdio/path@placed'] : [])]) {
      const s = file.scenarios.find((x) => x.name === name);
      const compute = s?.server_ms?.compute_ms ?? 0;
      assert.ok(compute > 0 && (s?.server_ms?.total_ms ?? 0) >= compute, name);
      assert.ok(s?.cpu_ms_per_call && s.cpu_ms_per_call.gateway >= 0, name);
    }
    assert.deepEqual(
      file.targets.map((t) => t.target),
      ['oip/binary', 'stdio/path', 'oip/binary+spin', 'stdio/path+spin'],
    );
    const section = renderFixedCost([file]);
    assert.match(section, /^## Fixed cost per call \(bench\/fixed-cost\)/);
    assert.match(section, /\| `stdio\/list_models` \|/);
    assert.match(section, /### Server stage timings/);
    // The floor's hop answers through a real Python process, which costs CPU of its own.
    const hop = file.scenarios.find((x) => x.name === 'floor/hop');
    assert.ok(hop?.cpu_ms_per_call && hop.cpu_ms_per_call.worker >= 0);
    assert.match(section, /The architecture floor \(`hop-server.ts`\): a bare node:http server answers/);
  });

  it('ab.ts interleaves two builds, block by block, and renders the comparison', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-fixed-cost-ab-smoke-')), 'ab.json');
    const args = ['--a', ROOT, '--b', ROOT, '--b-label', 'the same', '--calls', '5', '--rounds', '2'];
    await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'bench/fixed-cost/ab.ts'), ...args, '--warmup', '3', '--out', out],
      { cwd: ROOT, timeout: 280_000 },
    );
    const file = JSON.parse(readFileSync(out, 'utf8')) as FixedCostAbResult;
    assert.deepEqual(
      file.results.map((r) => r.scenario),
      ['oip/binary', 'oip/binary+spin', 'stdio/path', 'stdio/path+spin', 'http/path', 'http/list_models'],
    );
    for (const r of file.results) {
      assert.ok(r.p50_a_ms > 0 && r.p50_b_ms > 0, r.scenario);
      assert.ok(Number.isInteger(r.diff_us) && r.b_faster_rounds >= 0 && r.b_faster_rounds <= 2, r.scenario);
    }
    assert.equal(file.a.commit, file.b.commit);
    const section = renderFixedCostAb([file]);
    assert.match(section, /^## Two builds side by side \(bench\/fixed-cost\/ab.ts\)/);
    assert.match(section, /against B \S+ \(the same\)/);
    assert.match(section, /\| `stdio\/path\+spin` \| [\d.]+ \| [\d.]+ \| [+-]?\d+ \| \d\/2 \|/);
    assert.match(section, /\| `http\/list_models` \| [\d.]+ \| [\d.]+ \| [+-]?\d+ \| \d\/2 \|/);
    // A scenario it does not know is refused before anything starts.
    await assert.rejects(
      promisify(execFile)(
        process.execPath,
        [
          '--import',
          'tsx',
          join(ROOT, 'bench/fixed-cost/ab.ts'),
          '--a',
          ROOT,
          '--b',
          ROOT,
          '--scenarios',
          'oip/binary,nope',
        ],
        { cwd: ROOT, timeout: 60_000 },
      ),
      (err: Error & { stderr?: string }) => /unknown scenario nope; one of oip\/binary, /.test(err.stderr ?? ''),
    );
  });
});
