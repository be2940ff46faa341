import { existsSync } from 'node:fs';
import { resolve } from 'node:path';

/** Server-wide settings. Every limit here exists so that one bad call cannot hurt the next one. */
export interface GatewayConfig {
  /** Model repository scanned at start. */
  modelsDir: string;
  /**
   * The registry: a SQLite file (one machine), or a `postgres://` URL that several replicas
   * share (docs/deploy.md).
   */
  registry: string;
  /**
   * This replica's name, for several replicas on one shared registry: written with what it
   * registers, and the host part of its tensor:// handles. Unset on a single machine.
   */
  replicaId?: string;
  /** Folders under which `{path: ...}` tensor inputs may be read. */
  allowedRoots: string[];
  /** Most elements accepted in a nested JSON array input. */
  maxArrayElements: number;
  /** Most decoded bytes accepted in one inline base64 input or tensor file. */
  maxInputBytes: number;
  /** tensor:// store: total bytes kept and how long each output lives. */
  storeMaxBytes: number;
  storeTtlMs: number;
  /** Requests allowed to wait per model version before QUEUE_FULL (a model may set its own). */
  maxQueue: number;
  /** Per-request timeout when neither the request nor the model sets one. */
  defaultTimeoutMs: number;
  /** How long a stopping server lets queued and running requests finish. */
  shutdownGraceMs: number;
  /** Sum of resources.memory_mb x instances allowed loaded at once; undefined: no limit. */
  memoryBudgetMb?: number;
  /** Inputs with more JSON-array elements than this get a hint to use b64 or a path. */
  arrayHintElements: number;
  /** Largest MCP request body accepted over HTTP (inline b64 or arrays); larger ones get 413. */
  maxHttpBodyBytes: number;
  /** Where training runs (tensorgate.train) put their run files; trainers read TENSORGATE_RUNS_DIR. */
  runsDir: string;
  /** Append-only JSON-lines audit log of changes made through the server. */
  auditLogPath: string;
  /** Custom roles for RBAC (JSON); the built-in admin, inference and monitor always exist. */
  rolesFile?: string;
  /** Where compiled variants (AOTInductor packages) are kept, so that a restart does not compile again. */
  cacheDir: string;
}

/** The runs directory trainers and servers agree on unless told otherwise (tensorgate.train uses the same rule). */
export function defaultRunsDir(): string {
  return (
    process.env.TENSORGATE_RUNS_DIR || (existsSync('/dev/shm') ? '/dev/shm/tensorgate-runs' : '/tmp/tensorgate-runs')
  );
}

export function defaultConfig(cwd = process.cwd()): GatewayConfig {
  return {
    modelsDir: resolve(cwd, 'models'),
    registry: resolve(cwd, '.tensorgate', 'registry.db'),
    allowedRoots: [resolve(cwd)],
    maxArrayElements: 1_000_000,
    maxInputBytes: 512 * 1024 * 1024,
    storeMaxBytes: 256 * 1024 * 1024,
    storeTtlMs: 10 * 60 * 1000,
    maxQueue: 256,
    defaultTimeoutMs: 60_000,
    shutdownGraceMs: 10_000,
    arrayHintElements: 1024,
    maxHttpBodyBytes: 64 * 1024 * 1024,
    runsDir: defaultRunsDir(),
    auditLogPath: resolve(cwd, '.tensorgate', 'audit.jsonl'),
    cacheDir: process.env.TENSORGATE_CACHE_DIR || resolve(cwd, '.tensorgate', 'cache'),
  };
}
