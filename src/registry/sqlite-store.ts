import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { tgError } from '../errors.js';
import { type ModelConfig, parseModelConfig } from './model-config.js';
import {
  type JobRecord,
  type JobRow,
  jobColumns,
  jobFromRow,
  type LoadOutcome,
  type ModelRecord,
  type Registration,
  type RegistrySnapshot,
  type RegistryStore,
  registrationConflict,
  type VersionRecord,
  type VersionStatus,
  type WorkflowRecord,
} from './store.js';

/**
 * The embedded registry: one SQLite file (WAL), the default for a single machine. Several
 * processes may open the file (a server and `tensorgate register`); `watch` notices their
 * commits through `PRAGMA data_version`, which changes whenever another connection commits.
 */

/** Schema migrations by `PRAGMA user_version`; files written before migrations existed are at 0. */
const MIGRATIONS = [
  `CREATE TABLE IF NOT EXISTS models (
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
   );`,
  `ALTER TABLE models ADD COLUMN revision INTEGER NOT NULL DEFAULT 1;
   ALTER TABLE models ADD COLUMN registered_by TEXT;
   ALTER TABLE versions ADD COLUMN replica TEXT;
   ALTER TABLE workflows ADD COLUMN revision INTEGER NOT NULL DEFAULT 1;
   ALTER TABLE workflows ADD COLUMN registered_by TEXT;`,
  `CREATE TABLE jobs (
     id TEXT PRIMARY KEY,
     spec TEXT NOT NULL,
     items TEXT NOT NULL,
     state TEXT NOT NULL,
     progress TEXT NOT NULL,
     error TEXT,
     created_at TEXT NOT NULL,
     created_by TEXT,
     updated_at TEXT NOT NULL
   );`,
];

/** The schema version a file opened by this build is at. */
export const SCHEMA_VERSION = MIGRATIONS.length;

/** How often `watch` looks for commits by other processes. */
const WATCH_INTERVAL_MS = 1000;

interface ModelRow {
  name: string;
  dir: string;
  config: string;
  revision: number;
  registered_at: string;
  registered_by: string | null;
}
interface VersionRow {
  model: string;
  version: string;
  status: VersionStatus;
  error: string | null;
  load_ms: number | null;
  warmup_ms: number | null;
  updated_at: string;
  replica: string | null;
}

interface WorkflowRow {
  name: string;
  dir: string;
  definition: string;
  revision: number;
  registered_at: string;
  registered_by: string | null;
}

export class SqliteStore implements RegistryStore {
  readonly shared = false;
  private readonly db: Database.Database;
  private watcher: NodeJS.Timeout | undefined;

  constructor(readonly location: string) {
    if (location !== ':memory:') mkdirSync(dirname(location), { recursive: true });
    this.db = new Database(location);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('foreign_keys = ON');
    // Another process may be writing: wait for its lock rather than failing at once.
    this.db.pragma('busy_timeout = 5000');
    this.migrate();
  }

  private migrate(): void {
    this.db
      .transaction(() => {
        const current = this.db.pragma('user_version', { simple: true }) as number;
        for (let v = current; v < MIGRATIONS.length; v++) this.db.exec(MIGRATIONS[v] as string);
        if (current < MIGRATIONS.length) this.db.pragma(`user_version = ${MIGRATIONS.length}`);
      })
      .immediate();
  }

  async snapshot(): Promise<RegistrySnapshot> {
    return this.db
      .transaction(() => ({
        models: (this.db.prepare('SELECT * FROM models ORDER BY name').all() as ModelRow[]).map((row) =>
          this.toModel(row),
        ),
        workflows: (this.db.prepare('SELECT * FROM workflows ORDER BY name').all() as WorkflowRow[]).map(toWorkflow),
      }))
      .deferred();
  }

  async registerModel(registration: Registration<ModelConfig>): Promise<ModelRecord> {
    const { name, dir, body: config, replica } = registration;
    // IMMEDIATE takes the write lock first, so the revision read below cannot go stale.
    return this.db
      .transaction(() => {
        const row = this.db.prepare('SELECT * FROM models WHERE name = ?').get(name) as ModelRow | undefined;
        const stored = row && this.toModel(row);
        const check = registrationConflict('model', registration, stored);
        if (check.conflict) throw tgError('REGISTRATION_CONFLICT', check.message, { model: name });
        if (stored && registration.mode === 'sync' && sameModel(stored, dir, config)) return stored;
        const now = new Date().toISOString();
        this.db
          .prepare(
            `INSERT INTO models (name, dir, config, registered_at, registered_by, revision) VALUES (?, ?, ?, ?, ?, 1)
             ON CONFLICT(name) DO UPDATE SET dir = excluded.dir, config = excluded.config,
               registered_at = excluded.registered_at, registered_by = excluded.registered_by,
               revision = models.revision + 1`,
          )
          .run(name, dir, JSON.stringify(config), now, replica);
        const versions = Object.keys(config.versions);
        this.db
          .prepare(`DELETE FROM versions WHERE model = ? AND version NOT IN (${versions.map(() => '?').join(',')})`)
          .run(name, ...versions);
        const insert = this.db.prepare(
          `INSERT INTO versions (model, version, status, updated_at, replica) VALUES (?, ?, 'registered', ?, ?)
           ON CONFLICT(model, version) DO UPDATE SET status = 'registered', error = NULL, load_ms = NULL,
             warmup_ms = NULL, updated_at = excluded.updated_at, replica = excluded.replica`,
        );
        for (const v of versions) insert.run(name, v, now, replica);
        return this.toModel(this.db.prepare('SELECT * FROM models WHERE name = ?').get(name) as ModelRow);
      })
      .immediate();
  }

  async registerWorkflow(registration: Registration<unknown>): Promise<WorkflowRecord> {
    const { name, dir, body: definition, replica } = registration;
    return this.db
      .transaction(() => {
        const row = this.db.prepare('SELECT * FROM workflows WHERE name = ?').get(name) as WorkflowRow | undefined;
        const stored = row && toWorkflow(row);
        const check = registrationConflict('workflow', registration, stored);
        if (check.conflict) throw tgError('REGISTRATION_CONFLICT', check.message, { workflow: name });
        if (stored && registration.mode === 'sync' && sameWorkflow(stored, dir, definition)) return stored;
        this.db
          .prepare(
            `INSERT INTO workflows (name, dir, definition, registered_at, registered_by, revision) VALUES (?, ?, ?, ?, ?, 1)
             ON CONFLICT(name) DO UPDATE SET dir = excluded.dir, definition = excluded.definition,
               registered_at = excluded.registered_at, registered_by = excluded.registered_by,
               revision = workflows.revision + 1`,
          )
          .run(name, dir, JSON.stringify(definition), new Date().toISOString(), replica);
        return toWorkflow(this.db.prepare('SELECT * FROM workflows WHERE name = ?').get(name) as WorkflowRow);
      })
      .immediate();
  }

  async setVersionStatus(
    name: string,
    version: string,
    status: VersionStatus,
    outcome: LoadOutcome,
    replica: string | null,
  ): Promise<void> {
    this.db
      .prepare(
        `UPDATE versions SET status = ?, error = ?, load_ms = ?, warmup_ms = ?, updated_at = ?, replica = ?
         WHERE model = ? AND version = ?`,
      )
      .run(
        status,
        outcome.error ?? null,
        outcome.loadMs ?? null,
        outcome.warmupMs ?? null,
        new Date().toISOString(),
        replica,
        name,
        version,
      );
  }

  async createJob(job: JobRecord): Promise<void> {
    this.db
      .prepare(
        `INSERT INTO jobs (id, spec, items, state, progress, error, created_at, created_by, updated_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        job.id,
        JSON.stringify(job.spec),
        JSON.stringify(job.items),
        job.state,
        JSON.stringify(job.progress),
        job.error,
        job.createdAt,
        job.createdBy,
        job.updatedAt,
      );
  }

  async updateJob(id: string, state: string, progress: unknown, error: string | null): Promise<void> {
    this.db
      .prepare('UPDATE jobs SET state = ?, progress = ?, error = ?, updated_at = ? WHERE id = ?')
      .run(state, JSON.stringify(progress), error, new Date().toISOString(), id);
  }

  async listJobs(withItems: boolean): Promise<JobRecord[]> {
    const rows = this.db.prepare(`SELECT ${jobColumns(withItems)} FROM jobs ORDER BY created_at DESC, id`).all();
    return (rows as JobRow[]).map(jobFromRow);
  }

  watch(changed: () => void): void {
    if (this.watcher) return;
    let seen = this.db.pragma('data_version', { simple: true }) as number;
    this.watcher = setInterval(() => {
      const now = this.db.pragma('data_version', { simple: true }) as number;
      if (now === seen) return;
      seen = now;
      changed();
    }, WATCH_INTERVAL_MS).unref();
  }

  async close(): Promise<void> {
    clearInterval(this.watcher);
    this.db.close();
  }

  private toModel(row: ModelRow): ModelRecord {
    const versions = (this.db.prepare('SELECT * FROM versions WHERE model = ?').all(row.name) as VersionRow[]).map(
      (v): VersionRecord => ({
        version: v.version,
        status: v.status,
        error: v.error,
        loadMs: v.load_ms,
        warmupMs: v.warmup_ms,
        updatedAt: v.updated_at,
        replica: v.replica,
      }),
    );
    return {
      name: row.name,
      dir: row.dir,
      config: parseModelConfig(JSON.parse(row.config), `registry entry ${row.name}`),
      revision: row.revision,
      registeredAt: row.registered_at,
      registeredBy: row.registered_by,
      versions: sortVersions(versions),
    };
  }
}

function toWorkflow(row: WorkflowRow): WorkflowRecord {
  return {
    name: row.name,
    dir: row.dir,
    definition: JSON.parse(row.definition) as unknown,
    revision: row.revision,
    registeredAt: row.registered_at,
    registeredBy: row.registered_by,
  };
}

export function sortVersions(versions: VersionRecord[]): VersionRecord[] {
  return versions.sort((a, b) => Number(a.version) - Number(b.version));
}

/** Whether a stored model already says what a registration would write (key order aside). */
export function sameModel(stored: ModelRecord, dir: string, config: ModelConfig): boolean {
  return stored.dir === dir && canonical(stored.config) === canonical(config);
}

export function sameWorkflow(stored: WorkflowRecord, dir: string, definition: unknown): boolean {
  return stored.dir === dir && canonical(stored.definition) === canonical(definition);
}

/** JSON with object keys sorted: PostgreSQL's jsonb does not keep key order. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );
}
