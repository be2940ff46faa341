import { closeSync, createReadStream, fsyncSync, openSync, renameSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';
import type { ColumnSource, SchemaElement } from 'hyparquet-writer';
import { fileWriter, ParquetWriter } from 'hyparquet-writer';
import type { Line } from './results-format.js';
import { TABLE_COLUMNS, tableRow } from './results-format.js';

/**
 * Writes a job's Parquet results from its committed JSONL lines: the CSV's columns (results-format.ts),
 * `answer` as a JSON column, a row group per ROW_GROUP lines so the lines are read and converted a
 * group at a time. Written to a temporary file, fsynced and renamed over the results path, so the
 * results file is whole or absent, never half-written.
 */

const ROW_GROUP = 10_000;

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

export async function writeParquetResults(linesPath: string, results: string): Promise<void> {
  const temporary = `${results}.writing`;
  const writer = new ParquetWriter({ writer: fileWriter(temporary), schema: SCHEMA, createdBy: 'tensorgate' });
  let group: Line[] = [];
  const input = createInterface({ input: createReadStream(linesPath), crlfDelay: Number.POSITIVE_INFINITY });
  try {
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
    syncFile(temporary);
    renameSync(temporary, results);
    syncFile(dirname(results));
  } catch (err) {
    rmSync(temporary, { force: true });
    throw err;
  }
}

function syncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
