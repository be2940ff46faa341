import { resolve } from 'node:path';
import { defaultConfig, type GatewayConfig } from '../config.js';
import { Gateway } from '../gateway.js';
import type { LogFormat, Logger, LogLevel } from '../observability/logger.js';
import { processLogging } from './logs.js';

export interface GlobalOptions {
  models: string;
  registry: string;
  allowRoot: string[];
  runsDir?: string;
  auditLog?: string;
  logLevel?: LogLevel;
  logFormat?: LogFormat;
}

export function configFrom(opts: GlobalOptions, overrides: Partial<GatewayConfig> = {}): GatewayConfig {
  const config = { ...defaultConfig(), ...overrides };
  config.modelsDir = resolve(opts.models);
  config.registryPath = resolve(opts.registry);
  if (opts.runsDir) config.runsDir = resolve(opts.runsDir);
  if (opts.auditLog) config.auditLogPath = resolve(opts.auditLog);
  if (opts.allowRoot.length > 0) config.allowedRoots = opts.allowRoot.map((r) => resolve(r));
  // MCP clients often start servers in "/": never let that silently open the whole file system.
  else if (process.cwd() === '/') config.allowedRoots = [];
  return config;
}

/** Progress and logs go to stderr: stdout may be the MCP stdio channel. */
export const stderrLogger: Logger = (msg, fields) => processLogging().log(msg, fields);

export function openGateway(opts: GlobalOptions, overrides: Partial<GatewayConfig> = {}, log = stderrLogger): Gateway {
  return new Gateway(configFrom(opts, overrides), log);
}
