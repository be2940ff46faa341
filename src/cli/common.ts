import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { defaultConfig, type GatewayConfig } from '../config.js';
import { Gateway } from '../gateway.js';
import type { LogFormat, Logger, LogLevel } from '../observability/logger.js';
import { isPostgresUrl } from '../registry/postgres-store.js';
import { processLogging } from './logs.js';

export interface GlobalOptions {
  models: string;
  registry: string;
  replicaId?: string;
  allowRoot: string[];
  runsDir?: string;
  auditLog?: string;
  cacheDir?: string;
  logLevel?: LogLevel;
  logFormat?: LogFormat;
}

export function configFrom(opts: GlobalOptions, overrides: Partial<GatewayConfig> = {}): GatewayConfig {
  const config = { ...defaultConfig(), ...overrides };
  config.modelsDir = resolve(opts.models);
  const shared = isPostgresUrl(opts.registry);
  config.registry = shared ? opts.registry : resolve(opts.registry);
  // Replicas sharing a registry need distinct names; in a Kubernetes pod the host name is the pod's.
  const replicaId = opts.replicaId ?? (shared ? hostname() : undefined);
  if (replicaId !== undefined) config.replicaId = replicaId;
  if (opts.runsDir) config.runsDir = resolve(opts.runsDir);
  if (opts.auditLog) config.auditLogPath = resolve(opts.auditLog);
  if (opts.cacheDir) config.cacheDir = resolve(opts.cacheDir);
  if (opts.allowRoot.length > 0) config.allowedRoots = opts.allowRoot.map((r) => resolve(r));
  // MCP clients often start servers in "/": never let that silently open the whole file system.
  else if (process.cwd() === '/') config.allowedRoots = [];
  return config;
}

/** Progress and logs go to stderr: stdout may be the MCP stdio channel. */
export const stderrLogger: Logger = (msg, fields) => processLogging().log(msg, fields);

export function openGateway(
  opts: GlobalOptions,
  overrides: Partial<GatewayConfig> = {},
  log = stderrLogger,
): Promise<Gateway> {
  return Gateway.open(configFrom(opts, overrides), log);
}
