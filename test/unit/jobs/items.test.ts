import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parquetWriteFile } from 'hyparquet-writer';
import { listItems } from '../../../src/jobs/items.js';

/**
 * A job's items from a column of a table: JSONL, CSV (quoted fields with commas and line breaks)
 * and Parquet (Snappy-compressed, as writers make it by default), every row an item so that an
 * item's index is its row's; bad tables refused with what is wrong.
 */

const dir = mkdtempSync(join(tmpdir(), 'tg-items-'));
const roots = [dir];
const texts = ['turn the lights on', 'what is, the weather', 'play "jazz"\nplease', ''];

async function column(name: string, content: string | (() => void), col = 'text'): Promise<string[]> {
  const path = join(dir, name);
  if (typeof content === 'string') writeFileSync(path, content);
  else content();
  return listItems({ table: path, column: col }, roots);
}

describe('table items', () => {
  it('reads a JSONL field, a row per line, a missing value left empty', async () => {
    const jsonl = `${texts.map((text, i) => JSON.stringify(i === 3 ? { id: i } : { id: i, text })).join('\n')}\n`;
    assert.deepEqual(await column('docs.jsonl', jsonl), texts);
  });

  it('reads a CSV column by its header, with quoted commas, quotes and line breaks', async () => {
    const quote = (t: string) => `"${t.replace(/"/g, '""')}"`;
    const csv = `id,text\n${texts.map((t, i) => `${i},${quote(t)}`).join('\n')}\n`;
    assert.deepEqual(await column('docs.csv', csv), texts);
    assert.deepEqual(await column('ids.csv', csv, 'id'), ['0', '1', '2', '3']);
  });

  it('reads a Parquet column', async () => {
    const path = join(dir, 'docs.parquet');
    const items = await column('docs.parquet', () =>
      parquetWriteFile({
        filename: path,
        columnData: [
          { name: 'id', data: [0, 1, 2, 3], type: 'INT32' },
          { name: 'text', data: [texts[0], texts[1], texts[2], null], type: 'STRING', nullable: true },
        ],
      }),
    );
    assert.deepEqual(items, texts);
  });

  it('refuses a missing column, an unknown format, a broken file and a table outside the roots', async () => {
    await assert.rejects(column('a.csv', 'id,body\n1,x\n'), {
      code: 'BAD_PARAMETER',
      message: /has no column "text"; it has id, body/,
    });
    await assert.rejects(column('a.tsv', 'text\nx\n'), {
      code: 'BAD_PARAMETER',
      message: /is not \.jsonl, \.csv or \.parquet/,
    });
    await assert.rejects(column('b.jsonl', '{"text": "x"}\n{broken\n'), { code: 'BAD_PARAMETER', message: /line 2/ });
    await assert.rejects(column('c.parquet', 'not parquet at all'), {
      code: 'BAD_PARAMETER',
      message: /not a readable parquet file/,
    });
    await assert.rejects(column('empty.csv', 'text\n'), { code: 'BAD_PARAMETER', message: /the table holds none/ });
    const outside = join(mkdtempSync(join(tmpdir(), 'tg-items-out-')), 'docs.csv');
    writeFileSync(outside, 'text\nx\n');
    await assert.rejects(listItems({ table: outside, column: 'text' }, roots), { code: 'PATH_NOT_ALLOWED' });
  });
});
