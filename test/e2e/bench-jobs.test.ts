import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { type JobsFile, renderJobs } from '../../bench/jobs/render.js';

/**
 * A smoke run of bench/jobs, short enough for CI: the Python loop, a job over the same photos
 * (checked inside to hold every item once), interactive calls with and without a job, the result
 * file and its docs section. The figures come from full runs (docs/benchmarks.md).
 */

const ROOT = join(import.meta.dirname, '..', '..');

describe('bench/jobs (smoke)', { timeout: 300_000 }, () => {
  it('measures the raw loop, a job, and interactive calls beside a job', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'tg-jobs-smoke-')), 'jobs.json');
    const args = ['--images', '300', '--seconds', '1', '--sporadic', '2', '--out', out];
    await promisify(execFile)(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/jobs/run.ts'), ...args], {
      cwd: ROOT,
      timeout: 280_000,
    });
    const file = JSON.parse(readFileSync(out, 'utf8')) as JobsFile;
    assert.equal(file.raw.items, 300);
    assert.ok(file.raw.items_per_s > 0 && file.job.items_per_s > 0);
    assert.ok(file.interactive.alone.n > 0 && file.interactive.during_job.n > 0);
    assert.equal(file.interactive.sporadic_during_job?.n, 2);
    assert.ok((file.predecoded_oip?.items_per_s ?? 0) > 0, 'pre-decoded tensors over OIP v2');
    const section = renderJobs([file]);
    assert.match(section, /^## Batch jobs \(bench\/jobs\)/);
    assert.match(section, /\| while a job runs, single calls 1\.5 s apart \(2; max [\d.]+ ms\) \|/);
  });
});
