import {
  closeSync,
  constants,
  existsSync,
  lstatSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
} from 'node:fs';
import { basename, dirname, extname, isAbsolute, join } from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, parquetSchema } from 'hyparquet';
import { tgError } from '../errors.js';
import {
  type AllowedFile,
  checkAllowedPath,
  inFolderOf,
  insideRoots,
  openAllowedFile,
  pathBeneath,
} from '../security/confined-files.js';
import type { TensorLayout } from '../tensor/npy.js';
import { readNpyLayout, readSafetensorsLayouts } from '../tensor/tensor-file.js';
import type { JobItems } from './spec.js';

/** More items than this in one job are refused: split the work into several jobs. */
export const MAX_ITEMS = 1_000_000;

/**
 * The job's items in the order they run: file paths (sorted, so a listing is the same every
 * time) or texts. (A job over an array's rows lists nothing: its rows are counted, see rowsFile.) Every path is checked against the allowed roots as a single call's would be.
 */
export async function listItems(items: Exclude<JobItems, { rows: string }>, roots: string[]): Promise<string[]> {
  let listed: string[];
  if ('table' in items) {
    const { file, fd } = openAllowedFile('items.table', items.table, roots);
    try {
      // Every row is an item, so that an item's index is its row's: answers join back to the table.
      return checkCount(await tableColumn(file.path, fd, items.column), true);
    } finally {
      closeSync(fd);
    }
  }
  if ('files' in items) {
    listed = items.files.map((path, i) => checkAllowedPath(`items.files[${i}]`, path, roots).real);
  } else if ('lines' in items) {
    const { fd } = openAllowedFile('items.lines', items.lines, roots);
    try {
      listed = readFileSync(fd, 'utf8')
        .split(/\r?\n/)
        .filter((line) => line.trim() !== '');
    } finally {
      closeSync(fd);
    }
  } else {
    const folder = allowedFolder(items.folder, roots);
    const match = items.pattern ? globMatcher(items.pattern) : () => true;
    listed = walk(folder, items.recursive)
      .filter((path) => match(basename(path)))
      .sort();
  }
  return checkCount(listed, false);
}

function checkCount(listed: string[], table: boolean): string[] {
  if (listed.length === 0)
    throw tgError('BAD_PARAMETER', `the job has no items: the ${table ? 'table' : 'folder, list or file'} holds none`, {
      parameter: 'items',
    });
  if (listed.length > MAX_ITEMS)
    throw tgError('BAD_PARAMETER', `the job has ${listed.length} items; at most ${MAX_ITEMS}: split it`, {
      parameter: 'items',
    });
  return listed;
}

/**
 * One column of a table as strings, a row each: JSONL (one object per line), CSV (its first row
 * names the columns) or Parquet. A value that is not a string is written out (numbers) or left
 * empty (null, missing), for the model to refuse as that item's error. `fd`: the file at `path`,
 * open; it is read through the descriptor, never by its name again.
 */
async function tableColumn(path: string, fd: number, column: string): Promise<string[]> {
  const format = extname(path).toLowerCase();
  const cell = (value: unknown) =>
    value === null || value === undefined ? '' : typeof value === 'string' ? value : String(value);
  const missing = (columns: string[]) =>
    tgError(
      'BAD_PARAMETER',
      `items.column: ${path} has no column "${column}"; it has ${columns.slice(0, 20).join(', ') || 'none'}`,
      { parameter: 'items.column' },
    );
  const unreadable = (err: unknown) =>
    tgError(
      'BAD_PARAMETER',
      `items.table: ${path} is not a readable ${format.slice(1)} file: ${(err as Error).message}`,
      {
        parameter: 'items.table',
      },
    );
  if (format === '.jsonl' || format === '.ndjson') {
    const rows = readFileSync(fd, 'utf8')
      .split(/\r?\n/)
      .filter((line) => line.trim() !== '')
      .map((line, i) => {
        try {
          return JSON.parse(line) as unknown;
        } catch (err) {
          throw unreadable(new Error(`line ${i + 1}: ${(err as Error).message}`));
        }
      });
    if (rows.length > 0 && !rows.some((r) => typeof r === 'object' && r !== null && column in r))
      throw missing(Object.keys((rows[0] ?? {}) as object));
    return rows.map((r) => cell(typeof r === 'object' && r !== null ? (r as Record<string, unknown>)[column] : null));
  }
  if (format === '.csv') {
    let rows: Record<string, string>[];
    try {
      rows = parseCsv(readFileSync(fd), {
        columns: true,
        skip_empty_lines: true,
        bom: true,
        relax_column_count: true,
      });
    } catch (err) {
      throw unreadable(err);
    }
    if (rows.length > 0 && !(column in (rows[0] as object))) throw missing(Object.keys(rows[0] as object));
    return rows.map((r) => cell(r[column]));
  }
  if (format === '.parquet') {
    let rows: Record<string, unknown>[];
    try {
      // hyparquet opens a file by its name: this name reaches the descriptor's file, whatever `path` names by now.
      const file = await asyncBufferFromFile(`/proc/self/fd/${fd}`);
      const metadata = await parquetMetadataAsync(file);
      const columns = parquetSchema(metadata).children.map((c) => c.element.name);
      if (!columns.includes(column)) throw missing(columns);
      rows = await parquetReadObjects({ file, metadata, columns: [column] });
    } catch (err) {
      throw (err as { code?: string }).code === 'BAD_PARAMETER' ? err : unreadable(err);
    }
    return rows.map((r) => cell(r[column]));
  }
  throw tgError('BAD_PARAMETER', `items.table: ${path} is not .jsonl, .csv or .parquet`, { parameter: 'items.table' });
}

function allowedFolder(folder: string, roots: string[]): string {
  if (!isAbsolute(folder))
    throw tgError('PATH_NOT_ALLOWED', `items.folder: "${folder}" is not absolute; give the full path`, {
      path: folder,
    });
  if (!existsSync(folder) || !statSync(folder).isDirectory())
    throw tgError('FILE_NOT_FOUND', `items.folder: ${folder} is not a folder on the server`, { path: folder });
  const real = realpathSync.native(folder);
  if (!insideRoots(real, roots))
    throw tgError(
      'PATH_NOT_ALLOWED',
      `items.folder: ${folder} is outside the allowed roots (${roots.join(', ')}); start the server with --allow-root`,
      { path: folder, roots },
    );
  return real;
}

/** Regular files under `folder`; links are followed only where they stay inside it. */
function walk(folder: string, recursive: boolean): string[] {
  const out: string[] = [];
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (recursive) visit(path);
      } else if (entry.isFile()) out.push(path);
      else if (entry.isSymbolicLink()) {
        let real: string;
        try {
          real = realpathSync.native(path);
        } catch {
          continue; // a dangling link is not an item
        }
        if (pathBeneath(folder, real) !== undefined && statSync(real).isFile()) out.push(path);
      }
    }
  };
  visit(folder);
  return out;
}

/** A file-name pattern: * is any run of characters, ? any one; nothing else is special. */
function globMatcher(pattern: string): (name: string) => boolean {
  const source = pattern
    .split('')
    .map((c) => (c === '*' ? '.*' : c === '?' ? '.' : c.replace(/[.+^${}()|[\]\\]/g, '\\$&')))
    .join('');
  const regex = new RegExp(`^${source}$`, 'i');
  return (name) => regex.test(name);
}

/** An array whose rows are a job's items: where its data lies, and how its items are named (`label[i]`). */
export interface RowsFile {
  /** The file as it was checked: a request's rows are read only while it is still that file. */
  file: AllowedFile;
  layout: TensorLayout;
  /** The file, and for a .safetensors file its tensor: `/data/x.safetensors:features`. */
  label: string;
}

/**
 * A `.npy` file, or one tensor of a `.safetensors` file (`tensor`, or its only one), under the
 * allowed roots, its header read and checked; its first dimension are the items.
 */
export function rowsFile(path: string, roots: string[], tensor?: string): RowsFile {
  const { file, fd } = openAllowedFile('items.rows', path, roots);
  try {
    return rowsOf(file, fd, path, tensor);
  } finally {
    closeSync(fd);
  }
}

function rowsOf(file: AllowedFile, fd: number, path: string, tensor: string | undefined): RowsFile {
  const { path: real, size } = file;
  const refuse = (message: string) => tgError('BAD_PARAMETER', `items.rows: ${message}`, { parameter: 'items.rows' });
  let found: RowsFile;
  if (/\.npy$/i.test(real)) {
    if (tensor !== undefined) throw refuse(`${path} is a .npy file, which holds one array: drop "tensor"`);
    found = { file, layout: readNpyLayout(fd, size), label: real };
  } else if (/\.safetensors$/i.test(real)) {
    const layouts = readSafetensorsLayouts(fd, size);
    const names = [...layouts.keys()].sort();
    const name = tensor ?? (names.length === 1 ? names[0] : undefined);
    if (name === undefined)
      throw refuse(
        `${path} holds ${names.length ? `the tensors ${names.join(', ')}` : 'no tensors'}; name the one whose rows are the items with "tensor"`,
      );
    const layout = layouts.get(name);
    if (!layout) throw refuse(`${path} has no tensor "${name}"; it holds ${names.join(', ') || 'none'}`);
    found = { file, layout, label: `${real}:${name}` };
  } else {
    throw refuse(`${path} is neither a .npy file (numpy.save) nor a .safetensors file (safetensors' save_file)`);
  }
  if (found.layout.shape.length === 0) throw refuse(`${found.label} holds a scalar; its first dimension are the items`);
  return found;
}

/**
 * Where results may be written: an absolute .jsonl, .csv or .parquet path (or, for `tensors`, the
 * .npy path made from it) whose folder exists under the allowed roots; an existing file only when
 * `overwrite`, and a link only when what it leads to is under the roots too. Answers the path with
 * its folder resolved.
 */
export function checkResultsPath(
  path: string,
  roots: string[],
  overwrite: boolean,
  what: 'results' | 'tensors' = 'results',
): string {
  if (what === 'results' && (!isAbsolute(path) || !/\.(jsonl|csv|parquet)$/i.test(path)))
    throw tgError('BAD_PARAMETER', `results: "${path}" must be an absolute path ending in .jsonl, .csv or .parquet`, {
      parameter: 'results',
    });
  const folder = dirname(path);
  if (!existsSync(folder) || !statSync(folder).isDirectory())
    throw tgError('FILE_NOT_FOUND', `${what}: the folder ${folder} does not exist on the server`, { path });
  const given = join(realpathSync.native(folder), basename(path));
  const real = resultsTarget(given, roots, what);
  if (existsSync(real) && !overwrite)
    throw tgError('RESULTS_EXIST', `${what}: ${path} exists; choose another path or pass "overwrite": true`, {
      path,
    });
  return given;
}

/**
 * The file a results path writes to: itself, or what a link there leads to, which must be under
 * the allowed roots. Checked whenever a job opens its file, as a link may be repointed meanwhile;
 * the file is then opened through its folder (openResultsFile), never by this name again.
 */
export function resultsTarget(path: string, roots: string[], what: 'results' | 'tensors' = 'results'): string {
  let real = path;
  if (lstatSync(path, { throwIfNoEntry: false })) {
    try {
      real = realpathSync.native(path);
    } catch {
      // Writing through a dangling link would create its target wherever it points.
      throw tgError(
        'PATH_NOT_ALLOWED',
        `${what}: ${path} is a link that leads nowhere; remove it or point it at a file`,
        {
          path,
        },
      );
    }
  }
  if (!insideRoots(real, roots))
    throw tgError(
      'PATH_NOT_ALLOWED',
      `${what}: ${path}${real === path ? '' : ` leads to ${real}, which`} is outside the allowed roots (${roots.join(', ')}); write it under one of them`,
      { path, roots },
    );
  return real;
}

const { O_RDONLY, O_RDWR, O_CREAT, O_TRUNC } = constants;
const RESULTS_FLAGS = { read: O_RDONLY, update: O_RDWR, create: O_RDWR | O_CREAT | O_TRUNC };

/**
 * Opens a job's results file (or one of its tensor files, or a Parquet job's lines): the file at
 * `path`, or what a link there leads to (resultsTarget), opened through its folder (see
 * security/confined-files.ts), so that a link put in its place after the check is refused rather
 * than followed. `create` makes the file, or empties it; `update` opens it as it is. Answers the
 * descriptor, which the caller closes.
 */
export function openResultsFile(
  path: string,
  roots: string[],
  how: keyof typeof RESULTS_FLAGS,
  what: 'results' | 'tensors' = 'results',
): number {
  const target = resultsTarget(path, roots, what);
  try {
    return inFolderOf(target, roots, (folder, name) => folder.openFile(name, RESULTS_FLAGS[how], what));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ELOOP') throw err;
    throw tgError(
      'PATH_NOT_ALLOWED',
      `${what}: ${path} was replaced by a link while it was opened; write to a file that nothing else changes`,
      { path, roots },
    );
  }
}

/**
 * Removes the results file at `path` if there is one (a link there, not what it leads to), through
 * its folder as openResultsFile opens it. A folder that is gone holds nothing to remove.
 */
export function removeResultsFile(path: string, roots: string[]): void {
  try {
    inFolderOf(path, roots, (folder, name) => rmSync(folder.at(name, 'results'), { force: true }));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err;
  }
}
