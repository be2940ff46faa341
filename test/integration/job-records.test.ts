import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { PostgresStore } from '../../src/registry/postgres-store.js';
import { SqliteStore } from '../../src/registry/sqlite-store.js';
import type { JobRecord, RegistryStore } from '../../src/registry/store.js';
import { type Postgres, startPostgres } from '../helpers/postgres.js';

/**
 * Batch jobs recorded in both registry backends, real ones: SQLite in a file (migrated from a
 * file written before jobs existed) and PostgreSQL (Debian's server on loopback).
 */

const job = (id: string, createdAt: string): JobRecord => ({
  id,
  spec: { model: 'digits', results: `/data/${id}.jsonl` },
  items: ['/data/a.png', '/data/b.png', 'a text, with "quotes"'],
  state: 'running',
  progress: { items: 3, done: 0, failed: 0, errors: {}, results_bytes: 0 },
  error: null,
  createdAt,
  createdBy: 'mcp:tests',
  updatedAt: createdAt,
});

async function recordsJobs(store: RegistryStore): Promise<void> {
  await store.createJob(job('first', '2026-12-05T07:00:00.000Z'));
  await store.createJob(job('second', '2026-12-05T07:01:00.000Z'));
  const progress = { items: 3, done: 2, failed: 1, errors: { BAD_IMAGE: 1 }, results_bytes: 120 };
  await store.updateJob('first', 'failed', progress, 'too many failures');
  const listed = await store.listJobs(false);
  assert.deepEqual(
    listed.map((j) => j.id),
    ['second', 'first'],
    'newest first',
  );
  const first = listed.find((j) => j.id === 'first');
  assert.equal(first?.state, 'failed');
  assert.equal(first?.error, 'too many failures');
  assert.deepEqual(first?.progress, progress);
  assert.deepEqual(first?.spec, { model: 'digits', results: '/data/first.jsonl' });
  assert.deepEqual(first?.items, [], 'items only when asked for');
  assert.equal(first?.createdBy, 'mcp:tests');
  assert.ok((first?.updatedAt ?? '') > '2026-12-05T07:00:00.000Z');
  const withItems = await store.listJobs(true);
  assert.deepEqual(withItems.find((j) => j.id === 'second')?.items, job('x', '').items);
}

describe('job records', () => {
  let db: Postgres | undefined;
  after(async () => {
    await db?.destroy();
  });

  it('SQLite: a registry file from before jobs is migrated, then records them', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'tg-jobs-sqlite-')), 'registry.db');
    new SqliteStore(file).close(); // the schema of today
    const raw = new Database(file);
    raw.exec('DROP TABLE jobs');
    raw.pragma('user_version = 2'); // as a registry written before jobs existed
    raw.close();
    const store = new SqliteStore(file);
    try {
      await recordsJobs(store);
    } finally {
      await store.close();
    }
  });

  describe('PostgreSQL', () => {
    before(async () => {
      db = await startPostgres();
    });
    it('records jobs in the shared registry', async () => {
      const store = await PostgresStore.open((db as Postgres).url);
      try {
        await recordsJobs(store);
      } finally {
        await store.close();
      }
    });
  });
});
