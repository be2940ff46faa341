import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { peersSvg } from '../../bench/peers/plot.js';
import { renderPeers } from '../../bench/peers/render.js';
import { LABELS, type PeersResult } from '../../bench/peers/results.js';

/**
 * A smoke run of bench/peers' harness, short enough for CI: the real tensorgate server over MCP
 * stdio and HTTP and OIP v2 (JSON, binary, shared memory), the raw forward, closed-loop clients,
 * the result file, the docs table and the plot. The peers themselves are measured only by
 * `bash bench/peers/run.sh`; here KServe is either measured (its environment exists) or reported
 * as not measured, with why, never silently left out.
 */

const ROOT = join(import.meta.dirname, '..', '..');
const run = promisify(execFile);

describe('bench/peers harness (smoke)', { timeout: 240_000 }, () => {
  it('measures every tensorgate system at each concurrency and renders the results', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-peers-smoke-')), 'peers.json');
    const args = ['--import', 'tsx', join(ROOT, 'bench/peers/run.ts')].concat(
      ['--systems', 'tensorgate,kserve-oip-binary', '--models', 'tabular', '--concurrency', '1,3'],
      ['--seconds', '0.4', '--warmup', '0.2', '--out', out],
    );
    await run(process.execPath, args, { cwd: ROOT, timeout: 200_000 });
    const result = JSON.parse(readFileSync(out, 'utf8')) as PeersResult;

    const tensorgate = Object.keys(LABELS).filter((s) => s.startsWith('tensorgate-'));
    assert.equal(tensorgate.length, 7);
    for (const system of tensorgate)
      for (const concurrency of [1, 3]) {
        const block = result.blocks.find((b) => b.system === system && b.concurrency === concurrency);
        assert.ok(block, `${system} c=${concurrency} measured`);
        assert.ok(block.latency.n > 0 && block.throughput > 0, `${system} c=${concurrency} answered`);
        assert.ok(block.latency.p50 <= block.latency.p99);
      }
    const raw = result.blocks.find((b) => b.system === 'raw');
    assert.ok(raw && raw.latency.n >= 50, 'the raw forward is the baseline');

    const kserveMeasured = result.blocks.some((b) => b.system === 'kserve-oip-binary');
    const kserveSkipped = result.skipped.find((s) => s.system === 'kserve-oip-binary');
    assert.ok(kserveMeasured !== Boolean(kserveSkipped), 'KServe is measured or reported as not measured');
    if (!existsSync(join(ROOT, '.tensorgate/peers/bin/python')))
      assert.match(kserveSkipped?.reason ?? '', /not installed: run bash bench\/peers\/setup-peers\.sh/);

    const doc = renderPeers([result]);
    assert.match(doc, /### tabular, concurrency 3/);
    assert.match(doc, /\| tensorgate OIP v2, shared memory \| [\d.]+ \|/);
    const svg = peersSvg(result);
    assert.match(svg, /^<svg /);
    for (const system of tensorgate) assert.ok(svg.includes(LABELS[system as keyof typeof LABELS]), system);
  });
});
