import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import FindMyWay from 'find-my-way';
import { asTensorgateError, type TensorgateError, tgError } from '../errors.js';
import type { Gateway } from '../gateway.js';
import { createMcpHttpHandler } from '../mcp/http.js';
import type { Logger } from '../observability/logger.js';
import { DataPlane, type DataPlaneOptions } from '../oip/data-plane/data-plane.js';
import { registerOipRoutes } from '../oip/routes.js';
import { SharedMemoryRegistry } from '../oip/shared-memory.js';
import type { Authenticator } from '../security/auth.js';
import type { RateLimiter } from '../security/rate-limit.js';
import { createAuthGate, isPublicPath, mayReadMetrics } from './auth-gate.js';
import { registerDashboardRoutes } from './dashboard.js';
import { DashboardSessions } from './dashboard-sessions.js';
import { createNodeServer, requestGuard, type TlsOptions, urlHost } from './node-server.js';

/**
 * The one HTTP server: MCP Streamable HTTP at /mcp, the Open Inference Protocol v2 under /v2,
 * Prometheus metrics at /metrics, the live dashboard under /dashboard, and /healthz. Routing is find-my-way (fastify's router) over plain node:http, so each adapter gets
 * the raw request and response and no framework sits on the tensor path. Host and Origin are
 * checked on every route against localhost and the names the server is given (DNS rebinding from
 * a browser is blocked either way); with auth on, every route but health needs a bearer
 * credential (auth-gate.ts); with a certificate, it is HTTPS only, TLS 1.3 by default.
 */

export type { TlsOptions } from './node-server.js';

export interface HttpOptions {
  tls?: TlsOptions;
  /** Bearer auth for every route but health (Authenticator.create decides whether it is on). */
  authenticator?: Authenticator;
  /** How clients reach the server (behind a proxy, or by name): the MCP resource URL and audience. */
  publicUrl?: string;
  /** Host names besides localhost that requests may address (the Host and Origin checks). */
  allowedHosts?: string[];
  /** Client connections served at once (default 4096); a request on one more gets 503. */
  maxConnections?: number;
  /** Per-caller request rates, checked once the caller is known; health routes are exempt. */
  rateLimiter?: RateLimiter;
  /** The OIP data plane: the protocol's data routes on a port of their own, served by threads. */
  dataPlane?: { port: number; threads: number; log?: Logger; staging?: DataPlaneOptions['staging'] };
}

const DEFAULT_MAX_CONNECTIONS = 4096;
/**
 * Connections past the limit are still accepted so that they can be told why (a 503, not a
 * reset), up to this many more; beyond that the kernel's backlog holds them. Bounds the
 * descriptors a flood of silent connections can take.
 */
const REFUSAL_HEADROOM = 256;
/**
 * How long a closing port waits for its connections to finish: by the time the transports close
 * the gateway has answered what was in flight, so what is left takes a SHUTTING_DOWN answer.
 */
const CLOSE_GRACE_MS = 1000;

function refuse(res: ServerResponse, err: TensorgateError, headers: Record<string, string> = {}): void {
  const body = JSON.stringify({ error: `${err.code}: ${err.message}` });
  res
    .writeHead(err.status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      ...headers,
    })
    .end(body);
}

const LOCAL_HOSTS = ['localhost', '127.0.0.1', '[::1]'];

/** Host names the Host and Origin checks accept: localhost, the bound address, the public URL's. */
function allowedHostnames(host: string, opts: HttpOptions): string[] {
  const names = new Set([...LOCAL_HOSTS, ...(opts.allowedHosts ?? [])]);
  if (host !== '0.0.0.0' && host !== '::') names.add(urlHost(host));
  if (opts.publicUrl) names.add(new URL(opts.publicUrl).hostname);
  return [...names];
}

export interface HttpServerHandle {
  server: Server;
  url: string;
  /** Base URL of the OIP v2 routes (what tritonclient calls the server URL, without the scheme). */
  oipUrl: string;
  /** Whether callers must authenticate. */
  auth: boolean;
  /** The OIP data plane's base URL (host:port, as oipUrl), when it is on. */
  dataPlaneUrl?: string;
  /** The data plane, when it is on. */
  dataPlane?: DataPlane;
  /**
   * The server begins to stop: both ports stop listening and close each connection after its
   * answer (ServerDrain); requests already taken are still answered.
   */
  stopIntake: () => void;
  /** Once the gateway has answered what was in flight: streams end and connections close. */
  close: () => Promise<void>;
}

export async function serveHttp(
  gateway: Gateway,
  port: number,
  host = '127.0.0.1',
  opts: HttpOptions = {},
): Promise<HttpServerHandle> {
  const authenticator = opts.authenticator;
  const mcp = createMcpHttpHandler(gateway);
  const router = FindMyWay({
    ignoreTrailingSlash: true,
    defaultRoute: (req, res) => {
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ error: `not found: ${req.method} ${req.url}; MCP is at /mcp, OIP v2 under /v2` }));
    },
  });
  router.on(['GET', 'POST', 'DELETE'], '/mcp', (req, res) => mcp.handle(req, res));
  router.on('GET', '/healthz', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 'ok' }));
  });
  router.on('GET', '/metrics', (req, res) => {
    if (!mayReadMetrics(gateway, req, res)) return;
    gateway.flushRecords();
    gateway.metrics.render().then(
      ({ text, contentType }) => res.writeHead(200, { 'content-type': contentType }).end(text),
      (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err)),
    );
  });
  const regions = new SharedMemoryRegistry();
  const closeOip = registerOipRoutes(router, gateway, regions);
  const sessions = authenticator ? new DashboardSessions() : undefined;
  const auditAuthFailure = (path: string, reason: string, remote: string) =>
    gateway.audit.record({ actor: `remote:${remote}`, action: 'auth_failed', target: `http:${path}`, reason });
  const closeDashboard = registerDashboardRoutes(
    router,
    gateway,
    authenticator && sessions
      ? {
          authenticator,
          sessions,
          secure: Boolean(opts.tls),
          onFailure: (reason, remote) => auditAuthFailure('/dashboard/login', reason, remote),
        }
      : undefined,
  );

  const hostnames = allowedHostnames(host, opts);
  const guard = requestGuard(hostnames);
  let gate: ReturnType<typeof createAuthGate> | undefined;
  const maxConnections = opts.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  // Sockets that have been served, counted from their first request until they close.
  const served = new Set<Socket>();
  const admitConnection = (req: IncomingMessage, res: ServerResponse): boolean => {
    const socket = req.socket;
    if (served.has(socket)) return true;
    if (served.size >= maxConnections) {
      res.shouldKeepAlive = false;
      refuse(
        res,
        tgError(
          'TOO_MANY_CONNECTIONS',
          `the server is serving ${served.size} connections, its --max-connections; retry shortly, or reuse a kept-alive connection`,
          { max_connections: maxConnections },
        ),
        { 'retry-after': '1' },
      );
      return false;
    }
    served.add(socket);
    socket.once('close', () => served.delete(socket));
    return true;
  };
  const route = (req: IncomingMessage, res: ServerResponse) => {
    if (opts.rateLimiter && !isPublicPath(req)) {
      try {
        opts.rateLimiter.take(req.auth, req.socket.remoteAddress ?? 'unknown');
      } catch (err) {
        const error = asTensorgateError(err);
        refuse(res, error, { 'retry-after': String(error.data.retry_after_s ?? 1) });
        return;
      }
    }
    router.lookup(req, res);
  };
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    if (!admitConnection(req, res)) return;
    if (!guard(req, res)) return;
    if (!gate) {
      route(req, res);
      return;
    }
    gate.admit(req, res).then(
      (admitted) => admitted && route(req, res),
      (err: unknown) =>
        res
          .writeHead(500, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: `INTERNAL: ${String(err)}` })),
    );
  };
  const { server, drain } = createNodeServer(opts.tls, listener);
  server.maxConnections = maxConnections + REFUSAL_HEADROOM;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  const scheme = opts.tls ? 'https' : 'http';
  const base = opts.publicUrl?.replace(/\/$/, '') ?? `${scheme}://${urlHost(host)}:${address.port}`;
  if (authenticator) {
    authenticator.audience ||= `${base}/mcp`;
    gate = createAuthGate(
      authenticator,
      new URL(`${base}/mcp`),
      ({ path, reason, remote }) => auditAuthFailure(path, reason, remote),
      sessions,
    );
  }
  let dataPlane: DataPlane | undefined;
  if (opts.dataPlane) {
    try {
      dataPlane = await DataPlane.start(gateway, {
        host,
        port: opts.dataPlane.port,
        threads: opts.dataPlane.threads,
        ...(opts.tls ? { tls: opts.tls } : {}),
        hostnames,
        maxConnections,
        ...(opts.rateLimiter ? { rateLimiter: opts.rateLimiter } : {}),
        regions,
        gate: () => gate,
        ...(opts.dataPlane.log ? { log: opts.dataPlane.log } : {}),
        ...(opts.dataPlane.staging ? { staging: opts.dataPlane.staging } : {}),
      });
    } catch (err) {
      server.closeAllConnections();
      server.close();
      throw err;
    }
  }
  return {
    server,
    url: `${base}/mcp`,
    auth: authenticator !== undefined,
    oipUrl: `${host}:${address.port}`,
    ...(dataPlane ? { dataPlane, dataPlaneUrl: `${urlHost(host)}:${dataPlane.port}` } : {}),
    stopIntake: () => {
      drain.stopIntake();
      dataPlane?.stopIntake();
    },
    close: async () => {
      // Streams first (MCP sessions' SSE, the dashboard's), then both ports finish together.
      await mcp.close();
      closeOip();
      closeDashboard();
      await Promise.all([dataPlane?.close(), drain.finish(CLOSE_GRACE_MS)]);
    },
  };
}
