import pg from 'pg';
import { TensorgateError, tgError } from '../errors.js';
import { type ModelConfig, parseModelConfig } from './model-config.js';
import { sameModel, sameWorkflow, sortVersions } from './sqlite-store.js';
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
  type VersionStatus,
  type WorkflowRecord,
} from './store.js';

/**
 * The shared registry: PostgreSQL, for several gateway replicas. Registrations are serialised
 * per name with a transaction-scoped advisory lock and announced with NOTIFY; every replica
 * LISTENs on one connection of its own and refreshes its in-memory view when told. When the
 * database goes away, replicas keep serving from that view (reads never touch the database),
 * writes answer REGISTRY_UNAVAILABLE, and the listener reconnects with backoff, refreshing
 * once it is back in case it missed a notification.
 */

const CHANNEL = 'tensorgate_registry';
/** Key of the advisory lock under which replicas starting together apply migrations one at a time. */
const MIGRATION_LOCK = 7_365_120;

/** Schema migrations, applied in order and recorded in `tensorgate_schema`. */
const MIGRATIONS = [
  `CREATE TABLE models (
     name TEXT PRIMARY KEY,
     dir TEXT NOT NULL,
     config JSONB NOT NULL,
     revision BIGINT NOT NULL DEFAULT 1,
     registered_at TIMESTAMPTZ NOT NULL,
     registered_by TEXT
   );
   CREATE TABLE model_versions (
     model TEXT NOT NULL REFERENCES models(name) ON DELETE CASCADE,
     version TEXT NOT NULL,
     status TEXT NOT NULL,
     error TEXT,
     load_ms DOUBLE PRECISION,
     warmup_ms DOUBLE PRECISION,
     updated_at TIMESTAMPTZ NOT NULL,
     replica TEXT,
     PRIMARY KEY (model, version)
   );
   CREATE TABLE workflows (
     name TEXT PRIMARY KEY,
     dir TEXT NOT NULL,
     definition JSONB NOT NULL,
     revision BIGINT NOT NULL DEFAULT 1,
     registered_at TIMESTAMPTZ NOT NULL,
     registered_by TEXT
   );`,
  `CREATE TABLE jobs (
     id TEXT PRIMARY KEY,
     spec JSONB NOT NULL,
     items JSONB NOT NULL,
     state TEXT NOT NULL,
     progress JSONB NOT NULL,
     error TEXT,
     created_at TIMESTAMPTZ NOT NULL,
     created_by TEXT,
     updated_at TIMESTAMPTZ NOT NULL
   );`,
];

/** Reconnection backoff of the LISTEN connection: doubles from the first to the last. */
const RECONNECT_MS = [250, 5000] as const;

interface ModelRow {
  name: string;
  dir: string;
  config: unknown;
  revision: string;
  registered_at: Date;
  registered_by: string | null;
}
interface VersionRow {
  model: string;
  version: string;
  status: VersionStatus;
  error: string | null;
  load_ms: number | null;
  warmup_ms: number | null;
  updated_at: Date;
  replica: string | null;
}
interface WorkflowRow {
  name: string;
  dir: string;
  definition: unknown;
  revision: string;
  registered_at: Date;
  registered_by: string | null;
}

export function isPostgresUrl(location: string): boolean {
  return /^postgres(ql)?:\/\//.test(location);
}

export class PostgresStore implements RegistryStore {
  readonly shared = true;
  readonly location: string;
  private readonly pool: pg.Pool;
  private listener: pg.Client | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closed = false;

  private constructor(private readonly url: string) {
    this.location = redact(url);
    this.pool = new pg.Pool({
      connectionString: url,
      max: 4,
      connectionTimeoutMillis: 3000,
      idleTimeoutMillis: 30_000,
      // A database that stops answering must not hold a registration (or shutdown) forever.
      query_timeout: 10_000,
    });
    // An idle pooled connection that dies is discarded by the pool; the next query opens another.
    this.pool.on('error', () => {});
  }

  /** Connects and brings the schema up to date; REGISTRY_UNAVAILABLE when the database cannot be reached. */
  static async open(url: string): Promise<PostgresStore> {
    const store = new PostgresStore(url);
    try {
      await store.migrate();
    } catch (err) {
      await store.pool.end().catch(() => {});
      const cause = err instanceof TensorgateError ? err.cause : err;
      throw tgError(
        'REGISTRY_UNAVAILABLE',
        `the shared registry at ${store.location} cannot be opened: ${(cause as Error).message}; check the URL and that the database is up`,
        { registry: store.location },
        cause,
      );
    }
    return store;
  }

  private async migrate(): Promise<void> {
    await this.transaction(async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await client.query(
        'CREATE TABLE IF NOT EXISTS tensorgate_schema (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)',
      );
      const { rows } = await client.query<{ v: number | null }>('SELECT max(version) AS v FROM tensorgate_schema');
      for (let v = rows[0]?.v ?? 0; v < MIGRATIONS.length; v++) {
        await client.query(MIGRATIONS[v] as string);
        await client.query('INSERT INTO tensorgate_schema (version, applied_at) VALUES ($1, now())', [v + 1]);
      }
    });
  }

  async snapshot(): Promise<RegistrySnapshot> {
    // One REPEATABLE READ transaction: models, versions and workflows as of one moment.
    return this.transaction(async (client) => {
      const models = await client.query<ModelRow>('SELECT * FROM models ORDER BY name');
      const versions = await client.query<VersionRow>('SELECT * FROM model_versions');
      const workflows = await client.query<WorkflowRow>('SELECT * FROM workflows ORDER BY name');
      return {
        models: models.rows.map((row) =>
          toModel(
            row,
            versions.rows.filter((v) => v.model === row.name),
          ),
        ),
        workflows: workflows.rows.map(toWorkflow),
      };
    }, 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  }

  async registerModel(registration: Registration<ModelConfig>): Promise<ModelRecord> {
    const { name, dir, body: config, replica } = registration;
    return this.transaction(async (client) => {
      // Registrations of one name, from any replica, run one at a time from here on.
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`model:${name}`]);
      const stored = await readModel(client, name);
      const check = registrationConflict('model', registration, stored);
      if (check.conflict) throw tgError('REGISTRATION_CONFLICT', check.message, { model: name });
      if (stored && registration.mode === 'sync' && sameModel(stored, dir, config)) return stored;
      await client.query(
        `INSERT INTO models (name, dir, config, registered_at, registered_by) VALUES ($1, $2, $3, now(), $4)
         ON CONFLICT (name) DO UPDATE SET dir = excluded.dir, config = excluded.config,
           registered_at = excluded.registered_at, registered_by = excluded.registered_by,
           revision = models.revision + 1`,
        [name, dir, JSON.stringify(config), replica],
      );
      const versions = Object.keys(config.versions);
      await client.query('DELETE FROM model_versions WHERE model = $1 AND NOT (version = ANY($2))', [name, versions]);
      await client.query(
        `INSERT INTO model_versions (model, version, status, updated_at, replica)
         SELECT $1, v, 'registered', now(), $3 FROM unnest($2::text[]) AS v
         ON CONFLICT (model, version) DO UPDATE SET status = 'registered', error = NULL, load_ms = NULL,
           warmup_ms = NULL, updated_at = excluded.updated_at, replica = excluded.replica`,
        [name, versions, replica],
      );
      await notify(client, { model: name });
      return (await readModel(client, name)) as ModelRecord;
    });
  }

  async registerWorkflow(registration: Registration<unknown>): Promise<WorkflowRecord> {
    const { name, dir, body: definition, replica } = registration;
    return this.transaction(async (client) => {
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`workflow:${name}`]);
      const stored = await readWorkflow(client, name);
      const check = registrationConflict('workflow', registration, stored);
      if (check.conflict) throw tgError('REGISTRATION_CONFLICT', check.message, { workflow: name });
      if (stored && registration.mode === 'sync' && sameWorkflow(stored, dir, definition)) return stored;
      await client.query(
        `INSERT INTO workflows (name, dir, definition, registered_at, registered_by) VALUES ($1, $2, $3, now(), $4)
         ON CONFLICT (name) DO UPDATE SET dir = excluded.dir, definition = excluded.definition,
           registered_at = excluded.registered_at, registered_by = excluded.registered_by,
           revision = workflows.revision + 1`,
        [name, dir, JSON.stringify(definition), replica],
      );
      await notify(client, { workflow: name });
      return (await readWorkflow(client, name)) as WorkflowRecord;
    });
  }

  async setVersionStatus(
    name: string,
    version: string,
    status: VersionStatus,
    outcome: LoadOutcome,
    replica: string | null,
  ): Promise<void> {
    await this.query(
      `UPDATE model_versions SET status = $1, error = $2, load_ms = $3, warmup_ms = $4, updated_at = now(), replica = $5
       WHERE model = $6 AND version = $7`,
      [status, outcome.error ?? null, outcome.loadMs ?? null, outcome.warmupMs ?? null, replica, name, version],
    );
  }

  async createJob(job: JobRecord): Promise<void> {
    await this.query(
      `INSERT INTO jobs (id, spec, items, state, progress, error, created_at, created_by, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
      [
        job.id,
        JSON.stringify(job.spec),
        JSON.stringify(job.items),
        job.state,
        JSON.stringify(job.progress),
        job.error,
        job.createdAt,
        job.createdBy,
        job.updatedAt,
      ],
    );
  }

  async updateJob(id: string, state: string, progress: unknown, error: string | null): Promise<void> {
    await this.query('UPDATE jobs SET state = $1, progress = $2, error = $3, updated_at = now() WHERE id = $4', [
      state,
      JSON.stringify(progress),
      error,
      id,
    ]);
  }

  async listJobs(withItems: boolean): Promise<JobRecord[]> {
    try {
      const { rows } = await this.pool.query<JobRow>(
        `SELECT ${jobColumns(withItems)} FROM jobs ORDER BY created_at DESC, id`,
      );
      return rows.map(jobFromRow);
    } catch (err) {
      throw this.unavailable(err);
    }
  }

  watch(changed: () => void, connection: (up: boolean, error?: Error) => void): void {
    if (this.listener || this.closed) return;
    let delay: number = RECONNECT_MS[0];
    let wasDown = false;
    const connect = async (): Promise<void> => {
      this.reconnectTimer = undefined;
      const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 3000 });
      this.listener = client;
      const lost = (error: Error) => {
        if (this.listener !== client) return;
        this.listener = undefined;
        client.removeAllListeners();
        client.on('error', () => {});
        void client.end().catch(() => {});
        if (this.closed) return;
        wasDown = true;
        connection(false, error);
        this.reconnectTimer = setTimeout(() => void connect(), delay);
        this.reconnectTimer.unref();
        delay = Math.min(delay * 2, RECONNECT_MS[1]);
      };
      client.on('error', lost);
      client.on('end', () => lost(new Error('the connection to PostgreSQL ended')));
      client.on('notification', () => changed());
      try {
        await client.connect();
        await client.query(`LISTEN ${CHANNEL}`);
      } catch (err) {
        lost(err as Error);
        return;
      }
      if (this.closed) {
        void client.end().catch(() => {});
        return;
      }
      delay = RECONNECT_MS[0];
      connection(true);
      // Notifications sent while the connection was down are gone: look at the whole registry.
      if (wasDown) changed();
    };
    void connect();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    const listener = this.listener;
    this.listener = undefined;
    if (listener) {
      listener.removeAllListeners();
      listener.on('error', () => {});
      await listener.end().catch(() => {});
    }
    await this.pool.end().catch(() => {});
  }

  private async query(text: string, values: unknown[]): Promise<void> {
    try {
      await this.pool.query(text, values);
    } catch (err) {
      throw this.unavailable(err);
    }
  }

  /** Runs `fn` in one transaction on one pooled connection; database failures become REGISTRY_UNAVAILABLE. */
  private async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>, begin = 'BEGIN'): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw this.unavailable(err);
    }
    let broken = false;
    try {
      await client.query(begin);
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {
        broken = true;
      });
      throw err instanceof TensorgateError ? err : this.unavailable(err);
    } finally {
      // A connection that failed mid-transaction is not handed to the next caller.
      client.release(broken);
    }
  }

  private unavailable(err: unknown) {
    const reason = (err as Error).message || String(err);
    return tgError(
      'REGISTRY_UNAVAILABLE',
      `the shared registry at ${this.location} cannot be used: ${reason}. Loaded models keep serving; registrations work again once the database is back`,
      { registry: this.location },
      err,
    );
  }
}

async function notify(client: pg.PoolClient, what: Record<string, string>): Promise<void> {
  // Delivered at COMMIT, to every listener, this process's own included (its refresh finds nothing new).
  await client.query('SELECT pg_notify($1, $2)', [CHANNEL, JSON.stringify(what)]);
}

async function readModel(client: pg.PoolClient, name: string): Promise<ModelRecord | undefined> {
  const { rows } = await client.query<ModelRow>('SELECT * FROM models WHERE name = $1', [name]);
  const row = rows[0];
  if (!row) return undefined;
  const versions = await client.query<VersionRow>('SELECT * FROM model_versions WHERE model = $1', [name]);
  return toModel(row, versions.rows);
}

async function readWorkflow(client: pg.PoolClient, name: string): Promise<WorkflowRecord | undefined> {
  const { rows } = await client.query<WorkflowRow>('SELECT * FROM workflows WHERE name = $1', [name]);
  return rows[0] && toWorkflow(rows[0]);
}

function toModel(row: ModelRow, versions: VersionRow[]): ModelRecord {
  return {
    name: row.name,
    dir: row.dir,
    config: parseModelConfig(row.config, `registry entry ${row.name}`),
    revision: Number(row.revision),
    registeredAt: row.registered_at.toISOString(),
    registeredBy: row.registered_by,
    versions: sortVersions(
      versions.map((v) => ({
        version: v.version,
        status: v.status,
        error: v.error,
        loadMs: v.load_ms,
        warmupMs: v.warmup_ms,
        updatedAt: v.updated_at.toISOString(),
        replica: v.replica,
      })),
    ),
  };
}

function toWorkflow(row: WorkflowRow): WorkflowRecord {
  return {
    name: row.name,
    dir: row.dir,
    definition: row.definition,
    revision: Number(row.revision),
    registeredAt: row.registered_at.toISOString(),
    registeredBy: row.registered_by,
  };
}

/** The URL without its password, for logs and error messages. */
function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'postgres://(unparseable URL)';
  }
}
