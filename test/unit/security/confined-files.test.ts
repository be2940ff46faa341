import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { openResultsFile, removeResultsFile } from '../../../src/jobs/items.js';
import { writeParquetResults } from '../../../src/jobs/parquet-results.js';
import { nativeAddon } from '../../../src/native.js';
import {
  AllowedFolder,
  openAllowedFile,
  openWithoutLinks,
  reopenAllowedFile,
  useOpenWithoutLinks,
} from '../../../src/security/confined-files.js';
import { encodeNpy } from '../../../src/tensor/npy.js';
import { npyFileSource } from '../../../src/tensor/tensor-file.js';

/**
 * Files under the allowed roots, opened so that the file checked is the file used. Each race is
 * played out deterministically: the swap an attacker with write access under a root would make
 * happens between the check and the use, and what lies outside the roots is neither read nor
 * written. Every test here reads or writes outside the roots when files are opened again by name.
 */

const root = mkdtempSync(join(tmpdir(), 'tg-confined-'));
const outside = mkdtempSync(join(tmpdir(), 'tg-outside-'));
const roots = [root];
after(() => {
  rmSync(root, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

const SECRET = Buffer.alloc(8192 + 128, 0x5a);
const secret = join(outside, 'secret.npy');
writeFileSync(secret, SECRET);

/** A .npy file of `n` float32 values (8 KiB for 2048: more than the header's read). */
function npyFile(path: string, n = 2048): Buffer {
  const bytes = encodeNpy({
    dtype: 'float32',
    shape: [n],
    data: new Uint8Array(new Float32Array(n).map((_, i) => i).buffer),
  });
  writeFileSync(path, bytes);
  return bytes;
}

/** Why openWithoutLinks cannot be tried here, if it cannot: no addon, or a kernel without openat2. */
function openat2Missing(): string | false {
  const addon = nativeAddon();
  if (addon === null) return 'the native addon is not built';
  const dir = openSync(root, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    closeSync(addon.openBeneath(dir, '.', constants.O_RDONLY));
    return false;
  } catch (err) {
    return `openat2 is not available here: ${(err as Error).message}`;
  } finally {
    closeSync(dir);
  }
}

function opened(path: string) {
  const { file, fd } = openAllowedFile('x', path, roots);
  closeSync(fd);
  return file;
}

for (const [way, on] of [
  ['openat2 where the path allows it, else through the folder', true],
  ['through the folder only', false],
] as const) {
  describe(`reading a file under the allowed roots: ${way}`, () => {
    before(() => useOpenWithoutLinks(on));
    after(() => useOpenWithoutLinks(true));

    it('opens a file, or a link under the roots to one, and names its real path', () => {
      const path = join(root, `a-${on}.npy`);
      const bytes = npyFile(path);
      const file = opened(path);
      assert.deepEqual([file.path, file.size], [path, bytes.byteLength]);
      const link = join(root, `latest-${on}.npy`);
      symlinkSync(path, link);
      assert.deepEqual([opened(link).path, opened(link).ino], [path, file.ino]);
    });

    it('refuses a path outside the roots, existing or not, so that answers tell nothing of what is there', () => {
      assert.throws(() => opened(secret), { code: 'PATH_NOT_ALLOWED', message: /outside the allowed roots/ });
      assert.throws(() => opened(join(outside, 'missing.npy')), { code: 'PATH_NOT_ALLOWED' });
      assert.throws(() => opened(join(outside, 'no-folder', 'missing.npy')), { code: 'PATH_NOT_ALLOWED' });
      assert.throws(() => opened(join(root, '..', 'x.npy')), { code: 'PATH_NOT_ALLOWED' });
      assert.throws(() => opened('relative.npy'), { code: 'PATH_NOT_ALLOWED', message: /not absolute/ });
      assert.throws(() => opened(join(root, 'missing.npy')), { code: 'FILE_NOT_FOUND', message: /does not exist/ });
      assert.throws(() => opened(join(root, 'no-folder', 'x.npy')), { code: 'FILE_NOT_FOUND' });
      const outward = join(root, `outward-${on}.npy`);
      symlinkSync(secret, outward);
      assert.throws(() => opened(outward), { code: 'PATH_NOT_ALLOWED' });
      const folderOut = join(root, `folder-out-${on}`);
      symlinkSync(outside, folderOut);
      assert.throws(() => opened(join(folderOut, 'secret.npy')), { code: 'PATH_NOT_ALLOWED' });
    });

    it('refuses a FIFO under the roots at once, as not a regular file, rather than waiting on it', () => {
      const fifo = join(root, `pipe-${on}.npy`);
      execFileSync('mkfifo', [fifo]);
      assert.throws(() => opened(fifo), { code: 'FILE_NOT_FOUND', message: /not a regular file/ });
    });

    it('refuses the data of a file swapped for a link after its header was checked', () => {
      const path = join(root, `swapped-${on}.npy`);
      npyFile(path);
      const { file, fd } = openAllowedFile('x', path, roots);
      const source = npyFileSource(file, fd);
      closeSync(fd);
      // Between the request's decoding and the read of its data, the name now leads outside.
      rmSync(path);
      symlinkSync(secret, path);
      const target = new Uint8Array(source.byteLength);
      assert.throws(() => source.fill(target), { code: 'FILE_NOT_FOUND', message: /was replaced by another file/ });
      assert.ok(!target.includes(0x5a), 'none of the outside file was read');
      assert.ok(source.file?.open, 'the worker is handed the same opener');
      assert.throws(() => source.file?.open?.(), { code: 'FILE_NOT_FOUND' });
    });

    it('refuses a file replaced by another between the check and the read, and one removed', () => {
      const path = join(root, `replaced-${on}.npy`);
      npyFile(path);
      const file = opened(path);
      closeSync(reopenAllowedFile(file, 'input "x"'));
      const other = join(root, `other-${on}.npy`);
      npyFile(other);
      renameSync(other, path);
      assert.throws(() => reopenAllowedFile(file, 'input "x"'), {
        code: 'FILE_NOT_FOUND',
        message: /^input "x" was replaced by another file before it could be read$/,
      });
      rmSync(path);
      assert.throws(() => reopenAllowedFile(file, 'input "x"'), {
        code: 'FILE_NOT_FOUND',
        message: /was removed before it could be read/,
      });
    });

    it('refuses a file whose folder was swapped for a link leading outside after the check', () => {
      const folder = join(root, `photos-${on}`);
      mkdirSync(folder);
      const path = join(folder, 'secret.npy');
      npyFile(path);
      const file = opened(path);
      renameSync(folder, join(root, `photos-moved-${on}`));
      symlinkSync(outside, folder);
      assert.throws(() => reopenAllowedFile(file, 'input "x"'), { code: 'PATH_NOT_ALLOWED' });
    });
  });
}

describe('writing a job file under the allowed roots', () => {
  it('creates, empties and updates a results file through its folder', () => {
    const path = join(root, 'out.jsonl');
    writeFileSync(path, 'old lines\n');
    closeSync(openResultsFile(path, roots, 'update'));
    assert.equal(readFileSync(path, 'utf8'), 'old lines\n');
    closeSync(openResultsFile(path, roots, 'create'));
    assert.equal(readFileSync(path, 'utf8'), '');
  });

  it('never truncates a file outside the roots through a link put in the results file place', () => {
    const victim = join(outside, 'victim.jsonl');
    writeFileSync(victim, 'keep me\n');
    const path = join(root, 'planted.jsonl');
    symlinkSync(victim, path);
    assert.throws(() => openResultsFile(path, roots, 'create'), { code: 'PATH_NOT_ALLOWED', message: /leads to/ });
    // The link put there between the check of the target and the open: O_NOFOLLOW refuses it.
    const folder = AllowedFolder.open(root, roots);
    try {
      assert.throws(() => folder.openFile('planted.jsonl', constants.O_RDWR | constants.O_TRUNC, 'results'), {
        code: 'ELOOP',
      });
    } finally {
      folder.close();
    }
    assert.equal(readFileSync(victim, 'utf8'), 'keep me\n');
  });

  it('never creates or removes a file outside the roots through a folder swapped for a link', () => {
    const folder = join(root, 'reports');
    symlinkSync(outside, folder);
    assert.throws(() => openResultsFile(join(folder, 'new.jsonl'), roots, 'create'), {
      code: 'PATH_NOT_ALLOWED',
    });
    assert.equal(existsSync(join(outside, 'new.jsonl')), false);
    // Nor removes one: a Parquet job removes the results it replaces.
    assert.throws(() => removeResultsFile(join(folder, 'secret.npy'), roots), { code: 'PATH_NOT_ALLOWED' });
    assert.ok(existsSync(secret));
  });

  it('writes Parquet results past a link planted at its temporary name, leaving the outside file whole', async () => {
    const lines = join(root, 'p.parquet.lines.jsonl');
    writeFileSync(lines, `${JSON.stringify({ index: 0, item: 'a', answer: { label: 'x' } })}\n`);
    const victim = join(outside, 'victim.parquet');
    writeFileSync(victim, 'keep me\n');
    const results = join(root, 'p.parquet');
    symlinkSync(victim, `${results}.writing`);
    await writeParquetResults(lines, results, roots);
    assert.equal(readFileSync(victim, 'utf8'), 'keep me\n');
    assert.equal(readFileSync(results).subarray(0, 4).toString(), 'PAR1');
    assert.equal(existsSync(`${results}.writing`), false);
  });
});

describe('opening a path with no link on the way in one call (openat2)', () => {
  const skip = openat2Missing();

  it('opens a plain path under a root, and leaves every other path to the folder way', { skip }, () => {
    const folder = join(root, 'plain');
    mkdirSync(folder);
    const path = join(folder, 'x.npy');
    npyFile(path);
    const fd = openWithoutLinks(path, roots);
    assert.equal(typeof fd, 'number');
    closeSync(fd as number);
    symlinkSync(path, join(folder, 'link.npy'));
    symlinkSync(folder, join(root, 'plain-link'));
    for (const other of [
      join(folder, 'link.npy'), // the file's own name is a link
      join(root, 'plain-link', 'x.npy'), // a folder on the way is
      `${folder}/../plain/x.npy`, // not in normal form
      join(folder, 'missing.npy'),
      secret, // outside the roots
    ])
      assert.equal(openWithoutLinks(other, roots), undefined, other);
    // A root that is a file is for the folder way too.
    assert.equal(openWithoutLinks(path, [path]), undefined);
  });
});
