import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ERROR_CODES } from '../../src/errors.js';

test('docs/errors.md lists exactly the codes in src/errors.ts, with the same status and meaning', () => {
  const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
  const rows = new Map<string, { status: number; summary: string }>();
  for (const match of doc.matchAll(/^\| `([A-Z_]+)` \| (\d+) \| ([^|]+) \|/gm)) {
    rows.set(match[1] as string, { status: Number(match[2]), summary: (match[3] as string).trim() });
  }
  assert.deepEqual([...rows.keys()].sort(), Object.keys(ERROR_CODES).sort());
  for (const [code, info] of Object.entries(ERROR_CODES)) {
    assert.deepEqual(rows.get(code), { status: info.status, summary: info.summary }, code);
  }
});
