import { closeSync, constants, createReadStream, fsyncSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { createInterface } from 'node:readline';
import type { ColumnSource, SchemaElement } from 'hyparquet-writer';
import { fileWriter, ParquetWriter } from 'hyparquet-writer';
import { AllowedFolder } from '../security/confined-files.js';
import { openResultsFile, resultsTarget } from './items.js';
import type { Line } from './results-format.js';
import { TABLE_COLUMNS, tableRow } from './results-format.js';

/**
 * Writes a job's Parquet results from its committed JSONL lines: the CSV's columns (results-format.ts),
 * `answer` as a JSON column, a row group per ROW_GROUP lines so the lines are read and converted a
 * group at a time. Written to a temporary file, fsynced and renamed over the results path, so the
 * results file is whole or absent, never half-written. Every file is opened, and the rename made,
 * through the results folder's descriptor, checked against the allowed roots
 * (security/confined-files.ts): a link put in either file's place meanwhile is not followed.
 */

const ROW_GROUP = 10_000;
const { O_WRONLY, O_CREAT, O_EXCL } = constants;

const SCHEMA: SchemaElement[] = [
  { name: 'root', num_children: TABLE_COLUMNS.length },
  { name: 'index', type: 'INT64', repetition_type: 'REQUIRED' },
  { name: 'item', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'REQUIRED' },
  { name: 'label', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
  { name: 'score', type: 'DOUBLE', repetition_type: 'OPTIONAL' },
  { name: 'text', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
  { name: 'error', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
  { name: 'error_message', type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' },
  { name: 'answer', type: 'BYTE_ARRAY', converted_type: 'JSON', repetition_type: 'OPTIONAL' },
];

function columnsOf(lines: Line[]): ColumnSource[] {
  const rows = lines.map(tableRow);
  return TABLE_COLUMNS.map((name) => ({
    name,
    data: name === 'index' ? rows.map((r) => BigInt(r.index)) : rows.map((r) => r[name]),
    nullable: name !== 'index' && name !== 'item',
  }));
}

export async function writeParquetResults(linesPath: string, results: string, roots: string[]): Promise<void> {
  const target = resultsTarget(results, roots);
  const folder = AllowedFolder.open(dirname(target), roots);
  const name = basename(target);
  const temporary = `${name}.writing`;
  let linesFd: number | undefined;
  let fd: number | undefined;
  try {
    linesFd = openResultsFile(linesPath, roots, 'read');
    // Made afresh: whatever is at the temporary name (a file a crash left, a link) goes first.
    rmSync(folder.at(temporary, 'results'), { force: true });
    fd = folder.openFile(temporary, O_WRONLY | O_CREAT | O_EXCL, 'results');
    // The writer opens its file by name: this one reaches the descriptor's file.
    const writer = new ParquetWriter({
      writer: fileWriter(`/proc/self/fd/${fd}`),
      schema: SCHEMA,
      createdBy: 'tensorgate',
    });
    let group: Line[] = [];
    const input = createInterface({
      input: createReadStream('', { fd: linesFd, autoClose: false }),
      crlfDelay: Number.POSITIVE_INFINITY,
    });
    for await (const text of input) {
      if (text === '') continue;
      group.push(JSON.parse(text) as Line);
      if (group.length === ROW_GROUP) {
        await writer.write({ columnData: columnsOf(group), rowGroupSize: ROW_GROUP });
        group = [];
      }
    }
    if (group.length > 0) await writer.write({ columnData: columnsOf(group), rowGroupSize: ROW_GROUP });
    await writer.finish();
    fsyncSync(fd);
    renameSync(folder.at(temporary, 'results'), folder.at(name, 'results'));
    fsyncSync(folder.descriptor);
  } catch (err) {
    if (fd !== undefined) rmSync(folder.at(temporary, 'results'), { force: true });
    throw err;
  } finally {
    if (fd !== undefined) closeSync(fd);
    if (linesFd !== undefined) closeSync(linesFd);
    folder.close();
  }
}
