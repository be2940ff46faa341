import { tgError } from '../errors.js';
import type { ModelConfig } from './model-config.js';
import { isPostgresUrl, PostgresStore } from './postgres-store.js';
import { SqliteStore } from './sqlite-store.js';
import type {
  LoadOutcome,
  ModelRecord,
  RegistrationMode,
  RegistrySnapshot,
  RegistryStore,
  VersionStatus,
  WorkflowRecord,
} from './store.js';

export type { ModelRecord, RegistrationMode, VersionRecord, VersionStatus, WorkflowRecord } from './store.js';

/**
 * The registry as the gateway sees it: which models and workflows are registered, from which
 * folder, with which config, and the outcome of each version's last load. Reads come from an
 * in-memory view, so no request ever waits on the database; writes go through to the backend
 * (SQLite by default, PostgreSQL when several replicas share one registry) and then update the
 * view. When another process changes the backend, `refresh` brings the view up to date and
 * tells the `onChange` listeners what moved.
 */

export interface RegistryChange {
  /** Models new to this view, or registered again (a new revision). */
  models: string[];
  /** Models no longer registered. */
  removed: string[];
  /** Workflows new, re-registered or removed. */
  workflows: string[];
}

export interface RegistryOptions {
  /** This process's replica name, recorded with what it writes. */
  replica?: string | undefined;
  log?: (message: string, fields: Record<string, unknown>) => void;
}

export class Registry {
  private models = new Map<string, ModelRecord>();
  private workflows = new Map<string, WorkflowRecord>();
  private readonly listeners: ((change: RegistryChange) => void)[] = [];
  /** Local writes so far: a refresh that started before one of them must not overwrite it. */
  private writes = 0;
  private refreshing: Promise<void> | undefined;
  private refreshAgain = false;
  private connected = true;

  private constructor(
    /** Where the registry lives; batch jobs (src/jobs) record themselves in it too. */
    readonly store: RegistryStore,
    private readonly options: RegistryOptions,
  ) {}

  /** Opens a SQLite file or a `postgres://` URL and reads the whole registry into memory. */
  static async open(location: string, options: RegistryOptions = {}): Promise<Registry> {
    const store = isPostgresUrl(location) ? await PostgresStore.open(location) : new SqliteStore(location);
    const registry = new Registry(store, options);
    try {
      registry.apply(await store.snapshot());
    } catch (err) {
      await store.close();
      throw err;
    }
    return registry;
  }

  /** Where the registry lives (no password), and whether other replicas share it. */
  get location(): string {
    return this.store.location;
  }

  get shared(): boolean {
    return this.store.shared;
  }

  /** False while a shared registry's connection is down (what this view holds may be stale). */
  get reachable(): boolean {
    return this.connected;
  }

  has(name: string): boolean {
    return this.models.has(name);
  }

  get(name: string): ModelRecord {
    const record = this.models.get(name);
    if (!record)
      throw tgError('MODEL_NOT_FOUND', `no model "${name}" is registered; list them with list_models`, { name });
    return record;
  }

  names(): string[] {
    return [...this.models.keys()].sort();
  }

  list(): ModelRecord[] {
    return this.names().map((name) => this.models.get(name) as ModelRecord);
  }

  listWorkflows(): WorkflowRecord[] {
    return [...this.workflows.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  /**
   * Records a model and its versions as registered (not yet proven loadable). `replace` refuses
   * with REGISTRATION_CONFLICT when another process registered the name since this view last saw it.
   */
  async upsert(
    name: string,
    dir: string,
    config: ModelConfig,
    mode: RegistrationMode = 'replace',
  ): Promise<ModelRecord> {
    const record = await this.store.registerModel({
      name,
      dir,
      body: config,
      mode,
      expected: this.models.get(name)?.revision ?? null,
      replica: this.options.replica ?? null,
    });
    this.writes++;
    this.models.set(name, record);
    return record;
  }

  async upsertWorkflow(
    name: string,
    dir: string,
    definition: unknown,
    mode: RegistrationMode = 'replace',
  ): Promise<WorkflowRecord> {
    const record = await this.store.registerWorkflow({
      name,
      dir,
      body: definition,
      mode,
      expected: this.workflows.get(name)?.revision ?? null,
      replica: this.options.replica ?? null,
    });
    this.writes++;
    this.workflows.set(name, record);
    return record;
  }

  /**
   * Records a version's load outcome. Best effort: the outcome is also held live by the engine,
   * so a registry that cannot be written is logged, never an error for the load itself.
   */
  async setVersionStatus(name: string, version: string, status: VersionStatus, outcome: LoadOutcome = {}) {
    try {
      await this.store.setVersionStatus(name, version, status, outcome, this.options.replica ?? null);
    } catch (err) {
      this.options.log?.(`could not record ${name}@${version} as ${status}: ${(err as Error).message}`, {
        level: 'warn',
        model: name,
        version,
      });
    }
  }

  /** Calls `listener` after each refresh that found changes made by another process. */
  onChange(listener: (change: RegistryChange) => void): void {
    this.listeners.push(listener);
  }

  /** Starts following changes made by other processes (a server does; one-shot CLI commands do not). */
  watch(): void {
    this.store.watch(
      () => void this.refresh(),
      (up, error) => {
        if (up === this.connected) return;
        this.connected = up;
        this.options.log?.(
          up
            ? `the registry at ${this.location} is reachable again`
            : `lost the registry at ${this.location} (${error?.message}); loaded models keep serving, reconnecting`,
          { level: up ? 'info' : 'warn', registry: this.location },
        );
      },
    );
  }

  /** Reads the backend again and applies what changed; overlapping calls coalesce into one more pass. */
  refresh(): Promise<void> {
    if (this.refreshing) {
      this.refreshAgain = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        const writes = this.writes;
        let snapshot: RegistrySnapshot;
        try {
          snapshot = await this.store.snapshot();
        } catch (err) {
          this.options.log?.(`could not refresh the registry: ${(err as Error).message}`, { level: 'warn' });
          return;
        }
        // A local write landed while the snapshot was read: it may predate the write, so read again.
        if (writes !== this.writes) {
          this.refreshAgain = true;
          continue;
        }
        const change = this.apply(snapshot);
        if (change.models.length + change.removed.length + change.workflows.length > 0)
          for (const listener of this.listeners) listener(change);
      } while (this.refreshAgain);
    })().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  async close(): Promise<void> {
    await this.refreshing;
    await this.store.close();
  }

  /** Replaces the view with a snapshot and says what differs (by revision) from the view it replaces. */
  private apply(snapshot: RegistrySnapshot): RegistryChange {
    const models = new Map(snapshot.models.map((m) => [m.name, m]));
    const workflows = new Map(snapshot.workflows.map((w) => [w.name, w]));
    const change: RegistryChange = {
      models: snapshot.models.filter((m) => this.models.get(m.name)?.revision !== m.revision).map((m) => m.name),
      removed: [...this.models.keys()].filter((name) => !models.has(name)),
      workflows: [
        ...snapshot.workflows.filter((w) => this.workflows.get(w.name)?.revision !== w.revision).map((w) => w.name),
        ...[...this.workflows.keys()].filter((name) => !workflows.has(name)),
      ],
    };
    this.models = models;
    this.workflows = workflows;
    return change;
  }
}
