import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { accountExternalMemoryApart } from '../../src/cli/v8-heap.js';
import { ROOT } from '../helpers/models.js';

/** Full collections while dead 64 KB buffers pile up over a 30 MB heap, in a process of its own. */
function churn(env: NodeJS.ProcessEnv): { applied: boolean; major: number } {
  const out = execFileSync(process.execPath, ['--import', 'tsx', join(ROOT, 'test/fixtures/external-churn.ts')], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 120_000,
  });
  return JSON.parse(out) as { applied: boolean; major: number };
}

const knowsFlag = Number(process.versions.v8.split('.')[0]) >= 13;

test('dead socket-read-sized buffers no longer bring on full collections of the whole heap', {
  skip: knowsFlag ? false : `V8 ${process.versions.v8} has no --external-memory-accounted-in-global-limit`,
}, () => {
  const v8Default = churn({ TENSORGATE_V8_HEAP: 'default' });
  const apart = churn({ TENSORGATE_V8_HEAP: '' });
  assert.equal(v8Default.applied, false);
  assert.equal(apart.applied, true);
  assert.ok(v8Default.major >= 5, `V8's default accounting ran ${v8Default.major} full collections`);
  assert.ok(
    apart.major * 3 <= v8Default.major,
    `${apart.major} full collections with external memory apart, ${v8Default.major} without`,
  );
});

test('left alone on a V8 that does not know the flag, or when asked to', () => {
  assert.equal(accountExternalMemoryApart({}, '12.4.254.21-node.33'), false);
  assert.equal(accountExternalMemoryApart({ TENSORGATE_V8_HEAP: 'default' }), false);
});
