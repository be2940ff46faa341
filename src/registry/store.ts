import type { ModelConfig } from './model-config.js';

/**
 * What a registry backend stores, and the interface both backends implement: SQLite (embedded,
 * one machine, the default) and PostgreSQL (shared by several gateway replicas). The gateway
 * never reads a backend on a request's path: `Registry` (registry.ts) keeps an in-memory view,
 * writes through to the backend, and refreshes the view when `watch` says another process
 * changed it.
 */

export type VersionStatus = 'registered' | 'ready' | 'failed';

export interface VersionRecord {
  version: string;
  status: VersionStatus;
  error: string | null;
  loadMs: number | null;
  warmupMs: number | null;
  updatedAt: string;
  /** The replica that reported the status (null for a single-machine registry). */
  replica: string | null;
}

export interface ModelRecord {
  name: string;
  dir: string;
  config: ModelConfig;
  /** Raised by every registration: replicas compare it to know their view is stale. */
  revision: number;
  registeredAt: string;
  registeredBy: string | null;
  versions: VersionRecord[];
}

/** A registered workflow: its folder and the definition it was registered with. */
export interface WorkflowRecord {
  name: string;
  dir: string;
  definition: unknown;
  revision: number;
  registeredAt: string;
  registeredBy: string | null;
}

/**
 * A batch job (src/jobs): what it runs, where it stands, and its items as listed when it started
 * (a resumed job runs the same items in the same order even if the folder changed since).
 */
export interface JobRecord {
  id: string;
  spec: unknown;
  items: string[];
  state: string;
  progress: unknown;
  error: string | null;
  createdAt: string;
  createdBy: string | null;
  updatedAt: string;
}

/** A jobs table row as either backend returns it: JSON as text (SQLite) or parsed (PostgreSQL). */
export interface JobRow {
  id: string;
  spec: unknown;
  items?: unknown;
  state: string;
  progress: unknown;
  error: string | null;
  created_at: string | Date;
  created_by: string | null;
  updated_at: string | Date;
}

/** The columns listJobs reads; the items only when asked for (they may be a million paths). */
export function jobColumns(withItems: boolean): string {
  return withItems ? '*' : 'id, spec, state, progress, error, created_at, created_by, updated_at';
}

export function jobFromRow(row: JobRow): JobRecord {
  const json = (value: unknown) => (typeof value === 'string' ? (JSON.parse(value) as unknown) : value);
  return {
    id: row.id,
    spec: json(row.spec),
    items: row.items === undefined ? [] : (json(row.items) as string[]),
    state: row.state,
    progress: json(row.progress),
    error: row.error,
    createdAt: new Date(row.created_at).toISOString(),
    createdBy: row.created_by,
    updatedAt: new Date(row.updated_at).toISOString(),
  };
}

export interface RegistrySnapshot {
  models: ModelRecord[];
  workflows: WorkflowRecord[];
}

export interface LoadOutcome {
  error?: string;
  loadMs?: number;
  warmupMs?: number;
}

/**
 * How a registration treats what is already stored:
 * - `replace` (an explicit register): always writes, raising the revision so every replica
 *   reloads; refused with REGISTRATION_CONFLICT when the stored revision is not `expected`,
 *   i.e. someone else registered the name since this process last looked.
 * - `sync` (a server starting up and scanning its repository): writes only when the folder or
 *   config differ from what is stored, so replicas starting together do not fight.
 */
export type RegistrationMode = 'replace' | 'sync';

export interface Registration<T> {
  name: string;
  dir: string;
  /** The model config, or the workflow definition. */
  body: T;
  mode: RegistrationMode;
  /** The revision this process last saw; null when it believes the name is new. */
  expected: number | null;
  replica: string | null;
}

export interface RegistryStore {
  /** Where the registry lives, safe to print: a file path, or a URL without its password. */
  readonly location: string;
  /** True when other processes may write it at any time (PostgreSQL). */
  readonly shared: boolean;
  snapshot(): Promise<RegistrySnapshot>;
  registerModel(registration: Registration<ModelConfig>): Promise<ModelRecord>;
  registerWorkflow(registration: Registration<unknown>): Promise<WorkflowRecord>;
  setVersionStatus(
    name: string,
    version: string,
    status: VersionStatus,
    outcome: LoadOutcome,
    replica: string | null,
  ): Promise<void>;
  /**
   * Calls `changed` whenever another process may have changed the registry (and after a lost
   * connection comes back, when changes may have been missed); `connection` reports that state.
   */
  watch(changed: () => void, connection: (up: boolean, error?: Error) => void): void;
  /** Records a job when it starts (with its items). */
  createJob(job: JobRecord): Promise<void>;
  /** Records where a job stands: its state, progress and error. */
  updateJob(id: string, state: string, progress: unknown, error: string | null): Promise<void>;
  /** Every job, newest first; with its items only when `withItems`. */
  listJobs(withItems: boolean): Promise<JobRecord[]>;
  close(): Promise<void>;
}

/** The revision check both backends make before writing a registration. */
export function registrationConflict(
  kind: 'model' | 'workflow',
  registration: Registration<unknown>,
  stored: { revision: number; registeredBy: string | null; registeredAt: string } | undefined,
): { conflict: true; message: string } | { conflict: false } {
  const storedRevision = stored?.revision ?? null;
  if (registration.mode === 'sync' || storedRevision === registration.expected) return { conflict: false };
  const by = stored?.registeredBy ? ` by replica ${stored.registeredBy}` : '';
  const message = stored
    ? `${kind} "${registration.name}" was registered again${by} at ${stored.registeredAt} while this registration ran; check which folder should win, then register again`
    : `${kind} "${registration.name}" was removed while this registration ran; register it again`;
  return { conflict: true, message };
}
