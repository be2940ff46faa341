import { availableParallelism } from 'node:os';
import type { SecureVersion } from 'node:tls';
import { tgError } from '../errors.js';
import { type HttpOptions, type HttpServerHandle, serveHttp } from '../http/server.js';
import { serveStdio } from '../mcp/stdio.js';
import { serveGrpc } from '../oip/grpc.js';
import { Authenticator, type AuthMode } from '../security/auth.js';
import { RateLimiter } from '../security/rate-limit.js';
import { type GlobalOptions, openGateway, stderrLogger } from './common.js';
import { watchLoading } from './load-progress.js';
import { observeRequests } from './logs.js';
import { Progress } from './progress.js';
import { accountExternalMemoryApart } from './v8-heap.js';

export interface ServeOptions {
  stdio?: boolean;
  http?: number;
  /** Also serve OIP v2 over gRPC on this port. */
  grpc?: number;
  /** Also serve the OIP v2 data routes on this port, from `oipThreads` threads. */
  oipPort?: number;
  oipThreads?: number;
  host: string;
  maxBodyMb: number;
  memoryBudgetMb?: number;
  /** Export OpenTelemetry spans to this collector (else as the OTEL_* variables say, else not). */
  otlpEndpoint?: string;
  auth: AuthMode;
  apiKeys: string;
  roles?: string;
  jwtSecretFile?: string;
  jwksUrl?: string;
  jwtIssuer?: string;
  jwtAudience?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsMinVersion: SecureVersion;
  publicUrl?: string;
  allowedHost: string[];
  maxConnections: number;
  rateLimit?: number;
  rateBurst?: number;
}

/**
 * The network servers' security settings from the command line. The authenticator is made here,
 * before anything listens: where auth is needed and nothing is configured, the server never starts.
 */
function networkSecurity(opts: ServeOptions): HttpOptions {
  if (Boolean(opts.tlsCert) !== Boolean(opts.tlsKey))
    throw tgError('INVALID_CONFIG', 'HTTPS needs both --tls-cert and --tls-key');
  const authenticator = Authenticator.create(
    {
      mode: opts.auth,
      apiKeysPath: opts.apiKeys,
      ...(opts.jwtSecretFile ? { jwtSecretFile: opts.jwtSecretFile } : {}),
      ...(opts.jwksUrl ? { jwksUrl: opts.jwksUrl } : {}),
      ...(opts.jwtIssuer ? { jwtIssuer: opts.jwtIssuer } : {}),
      ...(opts.jwtAudience ? { jwtAudience: opts.jwtAudience } : {}),
    },
    opts.host,
  );
  return {
    ...(opts.oipPort !== undefined
      ? { dataPlane: { port: opts.oipPort, threads: opts.oipThreads ?? defaultDataThreads(), log: stderrLogger } }
      : {}),
    ...(authenticator ? { authenticator } : {}),
    ...(opts.tlsCert && opts.tlsKey
      ? { tls: { certFile: opts.tlsCert, keyFile: opts.tlsKey, minVersion: opts.tlsMinVersion } }
      : {}),
    ...(opts.publicUrl ? { publicUrl: opts.publicUrl } : {}),
    allowedHosts: opts.allowedHost,
    maxConnections: opts.maxConnections,
    // Always present: a key's own rate_limit applies even when the server sets no default.
    rateLimiter: new RateLimiter({
      defaultRps: opts.rateLimit ?? 0,
      ...(opts.rateBurst !== undefined ? { burst: opts.rateBurst } : {}),
    }),
  };
}

export const DEFAULT_HTTP_PORT = 8765;

function dataPlaneNote(handle: HttpServerHandle): string {
  if (!handle.dataPlane) return '';
  const scheme = handle.url.startsWith('https:') ? 'https' : 'http';
  return `, OIP v2 data plane at ${scheme}://${handle.dataPlaneUrl}/v2 (${handle.dataPlane.threadIds.length} threads)`;
}

/** Half the cores, 1 to 8: the rest run the workers (and the main thread). */
function defaultDataThreads(): number {
  return Math.max(1, Math.min(8, Math.floor(availableParallelism() / 2)));
}

/** --oip-port serves beside --http: refused where no HTTP server runs. */
function checkDataPlane(opts: ServeOptions): void {
  if (opts.oipThreads !== undefined && opts.oipPort === undefined)
    throw tgError('INVALID_CONFIG', '--oip-threads sets the threads of --oip-port; give --oip-port too');
  if (opts.oipPort !== undefined && opts.stdio)
    throw tgError('INVALID_CONFIG', '--oip-port serves beside the HTTP server; --stdio runs none (use --http)');
}

export async function runServe(global: GlobalOptions, opts: ServeOptions): Promise<void> {
  accountExternalMemoryApart();
  checkDataPlane(opts);
  // Checked first: a server that would listen unprotected where it must not never opens a model.
  const security = opts.stdio && opts.grpc === undefined ? {} : networkSecurity(opts);
  // n/N models ready on a terminal's stderr while they load; log lines print above it.
  const progress = new Progress({ label: 'loading models' });
  const gateway = await openGateway(
    global,
    {
      maxHttpBodyBytes: Math.round(opts.maxBodyMb * 1024 * 1024),
      ...(opts.roles ? { rolesFile: opts.roles } : {}),
      ...(opts.memoryBudgetMb !== undefined ? { memoryBudgetMb: opts.memoryBudgetMb } : {}),
    },
    progress.wrap(stderrLogger),
  );
  if (gateway.registry.shared)
    stderrLogger(`shared registry at ${gateway.registry.location}; this is replica ${gateway.config.replicaId}`);
  const stopObserving = await observeRequests(gateway, opts.otlpEndpoint);
  const loadAll = async () => {
    const unwatch = watchLoading(gateway, progress, 'reading the model repository');
    await gateway.loadAll().finally(() => {
      unwatch();
      progress.stop();
    });
  };
  // Not ready from here until the repository has loaded: the ports open first.
  gateway.beginStartup();
  gateway.training.start();
  void gateway.startGpuSampling();
  // Every transport started; closed together once the gateway has finished what is in flight.
  const transports: (() => Promise<void>)[] = [];
  // The HTTP ports stop taking connections as soon as the server begins to stop.
  let stopIntake: (() => void) | undefined;
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    progress.stop();
    // Stop intake and let queued and running requests finish (their answers still need the
    // transport), then close the transport; workers and shared memory are gone by then.
    stderrLogger(`${signal}: stopping; finishing requests in flight`);
    stopIntake?.();
    await gateway.close();
    await Promise.all(transports.map((close) => close()));
    await stopObserving();
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown('SIGINT'));
  process.once('SIGTERM', () => void shutdown('SIGTERM'));

  if (opts.grpc !== undefined) {
    const grpcServer = await serveGrpc(gateway, opts.grpc, opts.host, security);
    transports.push(grpcServer.close);
    stderrLogger(`OIP v2 gRPC at ${opts.host}:${grpcServer.port}`);
  }
  if (opts.stdio) {
    // Connect first so the client's initialize is answered while models load; infer says MODEL_NOT_READY until then.
    const handle = serveStdio(gateway);
    transports.push(handle.close);
    process.stdin.once('end', () => void shutdown('stdin closed'));
    stderrLogger('MCP over stdio; loading models');
    await loadAll();
    if (!stopping) stderrLogger(`ready: ${gateway.listModels().length} models`);
    return;
  }
  const handle = await serveHttp(gateway, opts.http ?? DEFAULT_HTTP_PORT, opts.host, security);
  transports.push(handle.close);
  stopIntake = handle.stopIntake;
  stderrLogger(
    `MCP Streamable HTTP at ${handle.url}, OIP v2 at ${handle.url.replace(/\/mcp$/, '')}/v2${dataPlaneNote(handle)} (auth ${handle.auth ? 'on' : 'off'}); loading models`,
  );
  await loadAll();
  if (!stopping) stderrLogger(`ready: ${gateway.listModels().length} models at ${handle.url}`);
}
