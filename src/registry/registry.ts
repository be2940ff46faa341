import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { tgError } from '../errors.js';
import { type ModelConfig, parseModelConfig } from './model-config.js';

/**
 * The persistent registry (SQLite, embedded): which models are registered, from which folder,
 * with which config, and the outcome of each version's last load + warm-up. Live readiness of a
 * running server is held by the engine; this table is what survives restarts.
 */

export type VersionStatus = 'registered' | 'ready' | 'failed';

export interface VersionRecord {
  version: string;
  status: VersionStatus;
  error: string | null;
  loadMs: number | null;
  warmupMs: number | null;
  updatedAt: string;
}

export interface ModelRecord {
  name: string;
  dir: string;
  config: ModelConfig;
  registeredAt: string;
  versions: VersionRecord[];
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS models (
  name TEXT PRIMARY KEY,
  dir TEXT NOT NULL,
  config TEXT NOT NULL,
  registered_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
  model TEXT NOT NULL REFERENCES models(name) ON DELETE CASCADE,
  version TEXT NOT NULL,
  status TEXT NOT NULL,
  error TEXT,
  load_ms REAL,
  warmup_ms REAL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (model, version)
);
CREATE TABLE IF NOT EXISTS workflows (
  name TEXT PRIMARY KEY,
  dir TEXT NOT NULL,
  definition TEXT NOT NULL,
  registered_at TEXT NOT NULL
);
`;

/** A registered workflow: its folder and the definition it was registered with. */
export interface WorkflowRecord {
  name: string;
  dir: string;
  definition: unknown;
  registeredAt: string;
}

interface ModelRow {
  name: string;
  dir: string;
  config: string;
  registered_at: string;
}
interface VersionRow {
  model: string;
  version: string;
  status: VersionStatus;
  error: string | null;
  load_ms: number | null;
  warmup_ms: number | null;
  updated_at: string;
}

export class Registry {
  private readonly db: Database.Database;

  constructor(path: string) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('foreign_keys = ON');
    this.db.exec(SCHEMA);
  }

  /** Records a model and its versions as registered (not yet proven loadable). Re-registering replaces the config. */
  upsert(name: string, dir: string, config: ModelConfig): void {
    const now = new Date().toISOString();
    const tx = this.db.transaction(() => {
      this.db
        .prepare(
          `INSERT INTO models (name, dir, config, registered_at) VALUES (?, ?, ?, ?)
           ON CONFLICT(name) DO UPDATE SET dir = excluded.dir, config = excluded.config`,
        )
        .run(name, dir, JSON.stringify(config), now);
      const versions = Object.keys(config.versions);
      this.db
        .prepare(`DELETE FROM versions WHERE model = ? AND version NOT IN (${versions.map(() => '?').join(',')})`)
        .run(name, ...versions);
      const insert = this.db.prepare(
        `INSERT INTO versions (model, version, status, updated_at) VALUES (?, ?, 'registered', ?)
         ON CONFLICT(model, version) DO UPDATE SET status = 'registered', error = NULL, updated_at = excluded.updated_at`,
      );
      for (const v of versions) insert.run(name, v, now);
    });
    tx();
  }

  setVersionStatus(
    name: string,
    version: string,
    status: VersionStatus,
    info: { error?: string; loadMs?: number; warmupMs?: number } = {},
  ): void {
    this.db
      .prepare(
        `UPDATE versions SET status = ?, error = ?, load_ms = ?, warmup_ms = ?, updated_at = ? WHERE model = ? AND version = ?`,
      )
      .run(
        status,
        info.error ?? null,
        info.loadMs ?? null,
        info.warmupMs ?? null,
        new Date().toISOString(),
        name,
        version,
      );
  }

  remove(name: string): boolean {
    return this.db.prepare('DELETE FROM models WHERE name = ?').run(name).changes > 0;
  }

  get(name: string): ModelRecord {
    const row = this.db.prepare('SELECT * FROM models WHERE name = ?').get(name) as ModelRow | undefined;
    if (!row)
      throw tgError('MODEL_NOT_FOUND', `no model "${name}" is registered; list them with list_models`, { name });
    return this.toRecord(row);
  }

  has(name: string): boolean {
    return this.db.prepare('SELECT 1 FROM models WHERE name = ?').get(name) !== undefined;
  }

  names(): string[] {
    return (this.db.prepare('SELECT name FROM models ORDER BY name').all() as { name: string }[]).map((r) => r.name);
  }

  list(): ModelRecord[] {
    const rows = this.db.prepare('SELECT * FROM models ORDER BY name').all() as ModelRow[];
    return rows.map((r) => this.toRecord(r));
  }

  /** Records a workflow; re-registering replaces its definition. */
  upsertWorkflow(name: string, dir: string, definition: unknown): void {
    this.db
      .prepare(
        `INSERT INTO workflows (name, dir, definition, registered_at) VALUES (?, ?, ?, ?)
         ON CONFLICT(name) DO UPDATE SET dir = excluded.dir, definition = excluded.definition`,
      )
      .run(name, dir, JSON.stringify(definition), new Date().toISOString());
  }

  removeWorkflow(name: string): boolean {
    return this.db.prepare('DELETE FROM workflows WHERE name = ?').run(name).changes > 0;
  }

  listWorkflows(): WorkflowRecord[] {
    const rows = this.db.prepare('SELECT * FROM workflows ORDER BY name').all() as {
      name: string;
      dir: string;
      definition: string;
      registered_at: string;
    }[];
    return rows.map((r) => ({
      name: r.name,
      dir: r.dir,
      definition: JSON.parse(r.definition) as unknown,
      registeredAt: r.registered_at,
    }));
  }

  close(): void {
    this.db.close();
  }

  private toRecord(row: ModelRow): ModelRecord {
    const versions = (this.db.prepare('SELECT * FROM versions WHERE model = ?').all(row.name) as VersionRow[])
      .map((v) => ({
        version: v.version,
        status: v.status,
        error: v.error,
        loadMs: v.load_ms,
        warmupMs: v.warmup_ms,
        updatedAt: v.updated_at,
      }))
      .sort((a, b) => Number(a.version) - Number(b.version));
    return {
      name: row.name,
      dir: row.dir,
      config: parseModelConfig(JSON.parse(row.config), `registry entry ${row.name}`),
      registeredAt: row.registered_at,
      versions,
    };
  }
}
