import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, ftruncateSync, openSync, readFileSync, readSync, unlinkSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { arenaPath, InputArena } from '../../../src/engines/torch/arena.js';
import { mapFile, shmMapAvailable, shmMapUnavailableReason } from '../../../src/engines/torch/shm-map.js';
import { pythonExecutable } from '../../../src/engines/torch/worker-process.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const PYTHON = pythonExecutable();
// The mapped path needs the addon (node-gyp rebuild); without it only the fallback is tested.
const noAddon = shmMapAvailable() ? false : `mmap addon unavailable: ${shmMapUnavailableReason()}`;

let counter = 0;
function tmpPath(): string {
  return arenaPath(`test-shm-${++counter}`);
}

function pattern(n: number, seed: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 0xff;
  return b;
}

function preadFile(path: string, offset: number, n: number): Buffer {
  const fd = openSync(path, 'r');
  try {
    const out = Buffer.alloc(n);
    assert.equal(readSync(fd, out, 0, n, offset), n);
    return out;
  } finally {
    closeSync(fd);
  }
}

/** What a separate process sees through its own mmap of the file: the worker's point of view. */
function pythonMmapHex(path: string, offset: number, n: number): string {
  const code =
    'import mmap, os, sys\n' +
    'p, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n' +
    'fd = os.open(p, os.O_RDONLY)\n' +
    'm = mmap.mmap(fd, os.fstat(fd).st_size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)\n' +
    'sys.stdout.write(m[off:off + n].hex())\n';
  return execFileSync(PYTHON, ['-c', code, path, String(offset), String(n)], { encoding: 'utf8' });
}

function mappingsOf(path: string): number {
  return readFileSync('/proc/self/maps', 'utf8')
    .split('\n')
    .filter((line) => line.endsWith(path) || line.endsWith(`${path} (deleted)`)).length;
}

test('mapFile: writes through the view reach the file, pread and a Python mmap', { skip: noAddon }, () => {
  const path = tmpPath();
  const fd = openSync(path, 'w+', 0o600);
  try {
    ftruncateSync(fd, 8192);
    const view = mapFile(fd, 8192) as Buffer;
    assert.ok(Buffer.isBuffer(view));
    assert.equal(view.byteLength, 8192);
    const bytes = pattern(1000, 7);
    bytes.copy(view, 4000);
    assert.deepEqual(preadFile(path, 4000, 1000), bytes);
    assert.equal(pythonMmapHex(path, 4000, 1000), bytes.toString('hex'));
    // And the other way: a write by another process shows up in our view (MAP_SHARED).
    execFileSync(PYTHON, [
      '-c',
      'import mmap, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\nm = mmap.mmap(fd, 8192)\nm[10:13] = b"abc"\nm.flush()',
      path,
    ]);
    assert.equal(view.subarray(10, 13).toString(), 'abc');
  } finally {
    closeSync(fd);
    unlinkSync(path);
  }
});

test('mapFile: bad arguments and mmap failures throw instead of crashing', { skip: noAddon }, () => {
  const path = tmpPath();
  const fd = openSync(path, 'w+', 0o600);
  try {
    ftruncateSync(fd, 4096);
    assert.throws(() => mapFile(fd, 0), { name: 'RangeError', message: /length must be an integer in \[1,/ });
    assert.throws(() => mapFile(fd, 1.5), RangeError);
    assert.throws(() => mapFile(-1, 10), RangeError);
    // Pages past the end of the file would SIGBUS when touched, so the mapping is refused.
    assert.throws(() => mapFile(fd, 8192), { code: 'EINVAL', syscall: 'mmap', message: /shorter than the 8192/ });
    const readOnly = openSync(path, 'r');
    try {
      assert.throws(() => mapFile(readOnly, 4096), { code: 'EACCES', syscall: 'mmap', message: /Permission denied/ });
    } finally {
      closeSync(readOnly);
    }
  } finally {
    closeSync(fd);
    unlinkSync(path);
  }
  assert.throws(() => mapFile(fd, 4096), { code: 'EBADF', message: /Bad file descriptor/ });
});

test('mapFile: a mapping is unmapped once the GC collects its last view', { skip: noAddon }, async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const path = tmpPath();
  const fd = openSync(path, 'w+', 0o600);
  try {
    ftruncateSync(fd, 4096);
    const before = mappingsOf(path);
    let views: Buffer[] = [];
    for (let i = 0; i < 20; i++) views.push(mapFile(fd, 4096) as Buffer);
    assert.equal(mappingsOf(path), before + 20);
    views = [];
    for (let i = 0; i < 10 && mappingsOf(path) > before; i++) {
      gc();
      await new Promise((r) => setImmediate(r));
    }
    assert.equal(mappingsOf(path), before, 'every mapping was unmapped');
    assert.equal(views.length, 0);
  } finally {
    closeSync(fd);
    unlinkSync(path);
  }
});

test('InputArena (mmap): reserve gives an exact view into the file; commit is a no-op', { skip: noAddon }, () => {
  const arena = new InputArena(tmpPath(), 4096, { mmap: true });
  try {
    assert.equal(arena.mapped, true);
    const slot = arena.reserve(1000);
    assert.equal(slot.view.byteLength, 1000);
    const bytes = pattern(1000, 3);
    const b64 = bytes.toString('base64');
    assert.equal(slot.view.write(b64, 'base64'), 1000, 'base64 decodes straight into the slot');
    slot.commit();
    assert.deepEqual(preadFile(arena.path, slot.offset, 1000), bytes);
    assert.equal(pythonMmapHex(arena.path, slot.offset, 1000), bytes.toString('hex'));
    const other = pattern(100, 9);
    const offset = arena.write(other);
    assert.notEqual(offset, slot.offset);
    assert.deepEqual(preadFile(arena.path, offset, 100), other);
  } finally {
    arena.close();
  }
});

test('InputArena (mmap): growth re-maps and views from before it stay usable', { skip: noAddon }, () => {
  const arena = new InputArena(tmpPath(), 4096, { mmap: true });
  try {
    const first = arena.reserve(4000);
    pattern(2000, 1).copy(first.view, 0);
    const second = arena.reserve(10_000); // does not fit: the file doubles (at least) and is mapped again
    assert.ok(arena.capacity >= 4096 + 10_000);
    assert.equal(readFileSync(arena.path).byteLength, arena.capacity);
    pattern(2000, 2).copy(first.view, 2000); // through the old mapping, after growth
    pattern(10_000, 4).copy(second.view);
    const expected = Buffer.concat([pattern(2000, 1), pattern(2000, 2)]);
    assert.deepEqual(first.view, expected);
    assert.deepEqual(preadFile(arena.path, first.offset, 4000), expected);
    assert.deepEqual(preadFile(arena.path, second.offset, 10_000), pattern(10_000, 4));
    assert.equal(pythonMmapHex(arena.path, first.offset, 4000), expected.toString('hex'));
    // A slot reserved after growth sees what was written through the old mapping.
    arena.release(first.offset);
    const reused = arena.reserve(4000);
    assert.equal(reused.offset, first.offset);
    assert.deepEqual(reused.view, expected);
  } finally {
    arena.close();
  }
});

test('InputArena (mmap): close unlinks the file; old views stay readable, new slots are refused', {
  skip: noAddon,
}, () => {
  const arena = new InputArena(tmpPath(), 4096, { mmap: true });
  const slot = arena.reserve(64);
  slot.view.fill(0xab);
  arena.close();
  arena.close(); // idempotent
  assert.equal(existsSync(arena.path), false);
  assert.equal(slot.view[63], 0xab, 'the mapping outlives the fd and the name');
  slot.view[0] = 1; // still writable memory: no SIGBUS
  assert.equal(slot.view[0], 1);
  assert.throws(() => arena.reserve(10), /is closed/);
  assert.throws(() => arena.write(new Uint8Array(4)), /is closed/);
});

test('InputArena: the mapped and fs paths leave identical bytes in the file', () => {
  const modes = noAddon ? [false] : [false, true];
  const files = modes.map((mmap) => {
    const arena = new InputArena(tmpPath(), 4096, { mmap });
    try {
      assert.equal(arena.mapped, mmap);
      const a = arena.reserve(3000);
      a.view.write(pattern(3000, 5).toString('base64'), 'base64');
      a.commit();
      const b = arena.write(pattern(700, 6));
      arena.release(a.offset);
      const c = arena.reserve(20_000); // grows
      pattern(20_000, 8).copy(c.view);
      c.commit();
      const d = arena.write(pattern(1500, 10)); // reuses the hole left by `a`
      assert.equal(d, a.offset);
      const empty = arena.reserve(0);
      assert.equal(empty.view.byteLength, 0);
      empty.commit();
      return {
        offsets: [a.offset, b, c.offset, d, empty.offset],
        capacity: arena.capacity,
        bytes: readFileSync(arena.path),
      };
    } finally {
      arena.close();
    }
  });
  const [fsPath, mapped] = files;
  assert.ok(fsPath);
  assert.deepEqual(fsPath.bytes.subarray(3008, 3008 + 700), pattern(700, 6));
  if (mapped) {
    assert.deepEqual(mapped.offsets, fsPath.offsets);
    assert.equal(mapped.capacity, fsPath.capacity);
    // The mapped path's file is preallocated (zeros); the fs path's is sparse (reads as zeros too).
    assert.ok(mapped.bytes.equals(fsPath.bytes), 'identical files');
  }
});

test('TENSORGATE_NO_MMAP=1 forces the fs path', () => {
  const script = `
    import { shmMapAvailable, shmMapUnavailableReason, mapFile } from './src/engines/torch/shm-map.ts';
    import { InputArena, arenaPath } from './src/engines/torch/arena.ts';
    const arena = new InputArena(arenaPath('test-no-mmap'), 4096);
    const slot = arena.reserve(4);
    slot.view.write('AQIDBA==', 'base64');
    slot.commit();
    const fs = await import('node:fs');
    const bytes = fs.readFileSync(arena.path).subarray(slot.offset, slot.offset + 4).toString('hex');
    arena.close();
    console.log(JSON.stringify({ available: shmMapAvailable(), reason: shmMapUnavailableReason(),
      mapped: arena.mapped, map: mapFile(0, 1) ?? null, bytes }));
  `;
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: ROOT,
    env: { ...process.env, TENSORGATE_NO_MMAP: '1' },
    encoding: 'utf8',
  });
  assert.deepEqual(JSON.parse(out), {
    available: false,
    reason: 'TENSORGATE_NO_MMAP=1',
    mapped: false,
    map: null,
    bytes: '01020304',
  });
});
