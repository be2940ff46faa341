import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { SharedMemoryRegistry } from '../../../src/oip/shared-memory.js';

/** Registering system shared memory opens the object as shm_open(3) would: never through a link. */

const outside = mkdtempSync(join(tmpdir(), 'tg-shm-outside-'));
const key = `/tg_test_link_${process.pid}`;
after(() => {
  rmSync(`/dev/shm${key}`, { force: true });
  rmSync(outside, { recursive: true, force: true });
});

test('a shared-memory key that is a link is refused, and the file it leads to is never opened', () => {
  const victim = join(outside, 'passwd');
  writeFileSync(victim, 'root:x:0:0\n');
  symlinkSync(victim, `/dev/shm${key}`);
  const regions = new SharedMemoryRegistry();
  try {
    assert.throws(() => regions.register('r', { key, byte_size: 4 }), {
      code: 'SHARED_MEMORY_NOT_FOUND',
      message: new RegExp(`^cannot open shared-memory object ${key}: ELOOP, it is a link`),
    });
    // The same object made as a client makes it (a regular file in /dev/shm) is registered.
    rmSync(`/dev/shm${key}`);
    writeFileSync(`/dev/shm${key}`, Buffer.alloc(16));
    regions.register('r', { key, byte_size: 16 });
    assert.equal(readFileSync(victim, 'utf8'), 'root:x:0:0\n');
  } finally {
    regions.close();
  }
});
