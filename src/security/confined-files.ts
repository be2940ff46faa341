import { closeSync, constants, fstatSync, openSync, readlinkSync, realpathSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, normalize, relative, resolve } from 'node:path';
import { tgError } from '../errors.js';
import { nativeAddon } from '../native.js';

/**
 * Files under the allowed roots, opened so that the file checked is the file used.
 *
 * Checking a path's real path against the roots and then opening the path by name leaves a window
 * in which someone who can write under a root puts a link in its place (or in place of a folder on
 * its way), and the open follows it out of the roots: a check-then-use race. Here a file is opened
 * through its folder instead. The folder is opened (following links; opening a folder does
 * nothing), its real path read back from the descriptor (/proc/self/fd) and checked against the
 * roots, and the file is then opened by name inside that descriptor's folder with O_NOFOLLOW: a
 * link put there in the meantime fails the open rather than leading anywhere. What the roots
 * allow is decided on what was opened, never on a name looked up again.
 *
 * A file read again later (its data after its header; the worker's read of a large input) is
 * opened the same way and must still be the same file (device and inode): one replaced in between
 * is refused, not read. O_NONBLOCK keeps a FIFO put in a file's place from hanging the open.
 *
 * Reads take a shorter way first where the kernel and the native addon allow (openWithoutLinks):
 * one openat2(2) beneath the root's own descriptor that refuses any link on the way, for a path
 * written plainly under a root. The folder's way, through /proc, costs four more system calls and
 * handles what that one refuses (a link on the way, a path with `..`, a root that is a file).
 */

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;
const READ = O_RDONLY | O_NONBLOCK | O_NOCTTY;

/** Whether `real`, a path with no links left in it, is one of the roots or lies under one. */
export function insideRoots(real: string, roots: readonly string[]): boolean {
  return roots.some((root) => pathBeneath(realRoot(root), real) !== undefined);
}

/**
 * `path` relative to `folder` where it is the folder itself ('') or lies under it, by their names
 * alone (neither is resolved); undefined otherwise.
 */
export function pathBeneath(folder: string, path: string): string | undefined {
  const rel = relative(folder, path);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel)) ? rel : undefined;
}

/**
 * Allowed roots by their real paths, resolved at first use rather than per request (a syscall per
 * root per input). A root re-pointed later (its symlink changed) keeps the target it had: the server
 * never widens what it allows behind the operator's back. A root not there yet is looked up again.
 */
const realRoots = new Map<string, string>();

function realRoot(root: string): string {
  const known = realRoots.get(root);
  if (known !== undefined) return known;
  try {
    const real = realpathSync.native(root);
    realRoots.set(root, real);
    return real;
  } catch {
    return resolve(root);
  }
}

/**
 * Descriptors of the roots' folders, by real path, opened at first use: openWithoutLinks opens
 * files beneath them. A root's folder is the one at its path when first used, as its real path is.
 */
const rootFolders = new Map<string, number>();

let withoutLinks = process.env.TENSORGATE_NO_OPENAT2 !== '1';

/** Turns the openat2 way off or on again (tests run both ways); off as TENSORGATE_NO_OPENAT2=1 is. */
export function useOpenWithoutLinks(on: boolean): void {
  withoutLinks = on;
}

/**
 * Opens `path` for reading in one system call when it is written plainly (absolute, normal form)
 * under one of the roots and nothing on its way from the root is a link: openat2(2) beneath the
 * root's descriptor, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS. The file opened is then exactly at
 * `path`, a real path under the root. Undefined where it cannot say (a link on the way, a file
 * not there, no openat2 here): the caller goes the folder's way, which decides and explains.
 */
export function openWithoutLinks(path: string, roots: readonly string[], flags = READ): number | undefined {
  if (!withoutLinks) return undefined;
  const addon = nativeAddon();
  if (!addon) return undefined;
  // Only a path in normal form: a `..` in it would be resolved here, not by the kernel.
  if (!isAbsolute(path) || normalize(path) !== path) return undefined;
  for (const root of roots) {
    const base = realRoot(root);
    const rel = pathBeneath(base, path);
    if (!rel) continue; // not under this root, or the root itself
    const folder = rootFolder(root, base);
    if (folder === undefined) continue;
    try {
      return addon.openBeneath(folder, rel, flags);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Not here (an old kernel, a seccomp filter that does not know it): the folder's way only.
      if (code === 'ENOSYS' || code === 'EPERM') withoutLinks = false;
      // A root folder removed since (and perhaps made again): opened afresh next time.
      else if (code === 'ENOENT' && fstatSync(folder).nlink === 0) {
        rootFolders.delete(base);
        closeSync(folder);
      }
      return undefined;
    }
  }
  return undefined;
}

function rootFolder(root: string, base: string): number | undefined {
  const known = rootFolders.get(base);
  if (known !== undefined) return known;
  if (!realRoots.has(root)) return undefined; // not there (yet)
  try {
    const fd = openSync(base, O_RDONLY | O_DIRECTORY);
    rootFolders.set(base, fd);
    return fd;
  } catch {
    return undefined;
  }
}

/**
 * A folder held open by its descriptor. Each name used in it is checked against the roots by the
 * folder's real path, as the descriptor reaches it, and reached through the descriptor
 * (`/proc/self/fd/N/name`), so it stays in this folder whatever the folder's path names by then.
 */
export class AllowedFolder {
  private constructor(
    private readonly fd: number,
    /** The folder's real path, as the descriptor reaches it. */
    readonly real: string,
    private readonly roots: readonly string[],
  ) {}

  /**
   * Opens `folder`; throws ENOENT or ENOTDIR as open(2) does when it is not a folder. Its names are
   * checked against the roots as they are used (`at`), so that a root that is a file is allowed.
   */
  static open(folder: string, roots: readonly string[]): AllowedFolder {
    const fd = openSync(folder, O_RDONLY | O_DIRECTORY);
    try {
      return new AllowedFolder(fd, readlinkSync(`/proc/self/fd/${fd}`), roots);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Whether `name` in this folder lies under the roots. */
  allows(name: string): boolean {
    return insideRoots(join(this.real, name), this.roots);
  }

  /**
   * `name` in this folder as a path that reaches it through the descriptor, for calls that take a
   * path (rename, unlink, a library that opens by name). Throws PATH_NOT_ALLOWED where `name` is
   * not under the roots. Valid while the folder is open.
   */
  at(name: string, what: string): string {
    if (!this.allows(name)) throw outsideRoots(what, join(this.real, name), this.roots);
    return `/proc/self/fd/${this.fd}/${name}`;
  }

  /**
   * Opens `name` in this folder with `flags` and O_NOFOLLOW: a link there fails with ELOOP rather
   * than being followed.
   */
  openFile(name: string, flags: number, what: string, mode = 0o666): number {
    return openSync(this.at(name, what), flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, mode);
  }

  /** The folder's descriptor, for fsync(2) after a rename in it. */
  get descriptor(): number {
    return this.fd;
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** Runs `use` with the folder of `path` open; closes it afterwards. */
export function inFolderOf<T>(
  path: string,
  roots: readonly string[],
  use: (folder: AllowedFolder, name: string) => T,
): T {
  const folder = AllowedFolder.open(dirname(path), roots);
  try {
    return use(folder, basename(path));
  } finally {
    folder.close();
  }
}

/** A regular file under the roots as it was when opened: where it is, how big, and which file it is. */
export interface AllowedFile {
  /** Its real path. */
  readonly path: string;
  readonly size: number;
  readonly dev: bigint;
  readonly ino: bigint;
  readonly roots: readonly string[];
}

/**
 * Opens the regular file at `path` for reading, if it lies under the roots: the descriptor and the
 * file it reaches. The caller closes the descriptor. Errors name the request's input (`input`):
 * PATH_NOT_ALLOWED for a relative path or one outside the roots, FILE_NOT_FOUND for a path that is
 * not there or not a regular file. A path outside the roots is refused as such whether or not
 * something is there, so that answers do not tell what exists outside them.
 */
export function openAllowedFile(
  input: string,
  path: string,
  roots: readonly string[],
): { file: AllowedFile; fd: number } {
  if (!isAbsolute(path)) {
    throw tgError('PATH_NOT_ALLOWED', `input "${input}": "${path}" is not absolute; give the full path of the file`, {
      input,
      path,
    });
  }
  const notFound = () =>
    tgError('FILE_NOT_FOUND', `input "${input}": ${path} does not exist on the server`, { input, path });
  const outside = () =>
    tgError(
      'PATH_NOT_ALLOWED',
      `input "${input}": ${path} is outside the allowed roots (${roots.join(', ')}); move the file under one of them or start the server with --allow-root`,
      { input, path, roots },
    );
  const direct = openWithoutLinks(path, roots);
  const opened =
    direct !== undefined ? { fd: direct, real: path } : openThroughFolder(input, path, roots, notFound, outside);
  const { fd, real } = opened;
  try {
    const stats = fstatSync(fd, { bigint: true });
    if (!stats.isFile())
      throw tgError('FILE_NOT_FOUND', `input "${input}": ${path} is not a regular file`, { input, path });
    return { fd, file: { path: real, size: Number(stats.size), dev: stats.dev, ino: stats.ino, roots } };
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

/** Opens `path` through its folder (see the top of this file); answers the descriptor and the file's real path. */
function openThroughFolder(
  input: string,
  path: string,
  roots: readonly string[],
  notFound: () => Error,
  outside: () => Error,
): { fd: number; real: string } {
  try {
    return inFolderOf(path, roots, (folder, name) => ({
      fd: folder.openFile(name, READ, `input "${input}"`),
      real: join(folder.real, name),
    }));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'PATH_NOT_ALLOWED') throw outside(); // in the input's own words
    if (code === 'ENOENT' || code === 'ENOTDIR') throw insideRoots(resolve(path), roots) ? notFound() : outside();
    // The file's own name is a link (ELOOP under O_NOFOLLOW): open what it leads to, checked the same way.
    if (code !== 'ELOOP') throw err;
    return openLinked(path, roots, notFound, outside);
  }
}

/** A path whose last name is a link: opens its target's real path, which must lie under the roots. */
function openLinked(
  path: string,
  roots: readonly string[],
  notFound: () => Error,
  outside: () => Error,
): { fd: number; real: string } {
  let real: string;
  try {
    real = realpathSync.native(path);
  } catch {
    throw notFound();
  }
  if (!insideRoots(real, roots)) throw outside();
  try {
    return inFolderOf(real, roots, (folder, name) => ({
      fd: folder.openFile(name, READ, path),
      real: join(folder.real, name),
    }));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw notFound();
    // A link again where the real path had none: it was changed while being opened.
    if (code === 'ELOOP') throw outside();
    throw err;
  }
}

/**
 * Opens `file` again for reading (its data after its header, a worker's read), through its folder
 * as at first. FILE_NOT_FOUND, naming it by `what`, if it is gone or is no longer the same file.
 */
export function reopenAllowedFile(file: AllowedFile, what: string): number {
  const replaced = () =>
    tgError('FILE_NOT_FOUND', `${what} was replaced by another file before it could be read`, { path: file.path });
  let fd: number;
  try {
    fd =
      openWithoutLinks(file.path, file.roots) ??
      inFolderOf(file.path, file.roots, (folder, name) => folder.openFile(name, READ, what));
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'PATH_NOT_ALLOWED') throw err;
    if (code === 'ELOOP') throw replaced(); // a link put in its place
    throw tgError('FILE_NOT_FOUND', `${what} was removed before it could be read`, { path: file.path });
  }
  const stats = fstatSync(fd, { bigint: true });
  if (stats.dev !== file.dev || stats.ino !== file.ino) {
    closeSync(fd);
    throw replaced();
  }
  return fd;
}

/**
 * Checks `path` as openAllowedFile does, opening it and closing it again: its real path and size,
 * for a listing (a job's files) whose files are each opened later as a request's input.
 */
export function checkAllowedPath(
  input: string,
  path: string,
  roots: readonly string[],
): { real: string; size: number } {
  const { fd, file } = openAllowedFile(input, path, roots);
  closeSync(fd);
  return { real: file.path, size: file.size };
}

function outsideRoots(what: string, path: string, roots: readonly string[]) {
  return tgError(
    'PATH_NOT_ALLOWED',
    `${what}: ${path} is outside the allowed roots (${roots.join(', ')}); use a path under one of them`,
    { path, roots },
  );
}
