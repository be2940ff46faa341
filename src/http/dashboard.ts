import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AuthInfo } from '@modelcontextprotocol/server';
import type FindMyWay from 'find-my-way';
import type { HTTPVersion } from 'find-my-way';
import type { Gateway } from '../gateway.js';
import { serverSnapshot } from '../metrics/snapshot.js';
import type { Authenticator } from '../security/auth.js';
import { mayReadMetrics } from './auth-gate.js';
import { type DashboardSessions, sessionCookie } from './dashboard-sessions.js';

/**
 * The live view. GET /dashboard is a static page (dashboard/ at the repository root: HTML, one
 * JS module, CSS, and uPlot from node_modules; nothing to build) that listens to
 * GET /dashboard/api/events (Server-Sent Events: a ServerSnapshot at once, then one a second).
 * GET /dashboard/api/snapshot is one snapshot as JSON, what `tensorgate top` polls. Snapshots are
 * only built while someone is watching.
 */

const DEFAULT_WINDOW_S = 60;
const MAX_WINDOW_S = 3600;
const TICK_MS = 1000;

type Router = FindMyWay.Instance<HTTPVersion.V1>;

/** Both src/http (run through tsx) and dist/http (compiled) sit two levels below the root. */
const PAGE_DIR = new URL('../../dashboard/', import.meta.url);
const uplotFile = (name: string) => createRequire(import.meta.url).resolve(`uplot/dist/${name}`);

/** The only files served, read once: no path from the request ever reaches the file system. */
const ASSETS: Record<string, { file: string | URL; type: string }> = {
  'app.js': { file: new URL('app.js', PAGE_DIR), type: 'text/javascript; charset=utf-8' },
  'style.css': { file: new URL('style.css', PAGE_DIR), type: 'text/css; charset=utf-8' },
  'uPlot.esm.js': { file: uplotFile('uPlot.esm.js'), type: 'text/javascript; charset=utf-8' },
  'uPlot.min.css': { file: uplotFile('uPlot.min.css'), type: 'text/css; charset=utf-8' },
};

/** The page loads only its own files and talks only to this server. */
const PAGE_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

interface StaticFile {
  body: Buffer;
  type: string;
  etag: string;
}

function staticFile(file: string | URL, type: string): StaticFile {
  const body = readFileSync(file);
  return { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` };
}

/** `no-cache` with an ETag: the browser asks each time and gets a 304 until tensorgate is upgraded. */
function sendStatic(req: IncomingMessage, res: ServerResponse, file: StaticFile): void {
  const headers = { 'cache-control': 'no-cache', etag: file.etag, ...PAGE_HEADERS };
  const ifNoneMatch = req.headers['if-none-match'];
  if (ifNoneMatch?.split(/\s*,\s*/).includes(file.etag)) {
    res.writeHead(304, headers).end();
    return;
  }
  res.writeHead(200, { 'content-type': file.type, ...headers }).end(file.body);
}

/** `?window=S` (seconds, 1-3600), else 60. */
function windowMs(req: IncomingMessage): number {
  const raw = new URL(req.url ?? '/', 'http://localhost').searchParams.get('window');
  const s = raw === null ? DEFAULT_WINDOW_S : Number(raw);
  return (Number.isFinite(s) && s >= 1 ? Math.min(s, MAX_WINDOW_S) : DEFAULT_WINDOW_S) * 1000;
}

/** What /dashboard/login needs when auth is on. */
export interface DashboardLogin {
  authenticator: Authenticator;
  sessions: DashboardSessions;
  /** Served over HTTPS: the cookie gets `Secure`. */
  secure: boolean;
  /** A refused credential, for the audit log. */
  onFailure: (reason: string, remote: string) => void;
}

const LOGIN_BODY_LIMIT = 16 * 1024;

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers });
  res.end(JSON.stringify(body));
}

async function readLoginToken(req: IncomingMessage): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > LOGIN_BODY_LIMIT) return undefined;
    chunks.push(chunk);
  }
  try {
    const token = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { token?: unknown }).token;
    return typeof token === 'string' ? token.trim() : undefined;
  } catch {
    return undefined;
  }
}

/**
 * POST /dashboard/login {"token": KEY_OR_JWT}: verifies the credential as the bearer check does,
 * requires that it may read the server's metrics (all the dashboard shows), and opens a session
 * (dashboard-sessions.ts). POST /dashboard/logout ends it.
 */
function registerLogin(router: Router, gateway: Gateway, login: DashboardLogin | undefined): void {
  router.on('POST', '/dashboard/login', async (req, res) => {
    if (!login) {
      sendJson(res, 400, { error: 'INVALID_REQUEST: auth is off on this server; the dashboard needs no login' });
      return;
    }
    const token = await readLoginToken(req);
    if (!token) {
      sendJson(res, 400, { error: 'INVALID_REQUEST: send {"token": "<API key or JWT>"} as JSON (at most 16 KiB)' });
      return;
    }
    let caller: AuthInfo;
    try {
      caller = await login.authenticator.verifyAccessToken(token);
    } catch (err) {
      login.onFailure((err as Error).message, req.socket.remoteAddress ?? 'unknown');
      sendJson(res, 401, { error: `UNAUTHENTICATED: ${(err as Error).message}` });
      return;
    }
    try {
      gateway.access.check(caller, 'read', 'server', 'metrics');
    } catch (err) {
      sendJson(res, 403, { error: `FORBIDDEN: ${(err as Error).message}` });
      return;
    }
    const { id, maxAgeS } = login.sessions.open(token, caller.expiresAt);
    res.writeHead(204, { 'set-cookie': sessionCookie(id, maxAgeS, login.secure), 'cache-control': 'no-store' }).end();
  });

  router.on('POST', '/dashboard/logout', (req, res) => {
    login?.sessions.close(req);
    res
      .writeHead(204, { 'set-cookie': sessionCookie('', 0, login?.secure ?? false), 'cache-control': 'no-store' })
      .end();
  });
}

/** Registers the dashboard routes; the returned function ends every open event stream. */
export function registerDashboardRoutes(router: Router, gateway: Gateway, login?: DashboardLogin): () => void {
  registerLogin(router, gateway, login);
  const streams = new Set<ServerResponse>();
  const page = staticFile(new URL('index.html', PAGE_DIR), 'text/html; charset=utf-8');
  const assets = new Map(Object.entries(ASSETS).map(([name, a]) => [name, staticFile(a.file, a.type)]));

  router.on('GET', '/dashboard', (req, res) => sendStatic(req, res, page));

  router.on('GET', '/dashboard/assets/:file', (req, res, params) => {
    const asset = assets.get(params.file ?? '');
    if (!asset) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'no such asset' }));
      return;
    }
    sendStatic(req, res, asset);
  });

  router.on('GET', '/dashboard/api/snapshot', (req, res) => {
    if (!mayReadMetrics(gateway, req, res)) return;
    serverSnapshot(gateway, windowMs(req)).then(
      (snapshot) => {
        if (res.destroyed) return;
        res
          .writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' })
          .end(JSON.stringify(snapshot));
      },
      (err: unknown) => {
        if (res.destroyed || res.headersSent) return;
        res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: `INTERNAL: ${err}` }));
      },
    );
  });

  router.on('GET', '/dashboard/api/events', (req, res) => {
    if (!mayReadMetrics(gateway, req, res)) return;
    const window = windowMs(req);
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-store',
      connection: 'keep-alive',
    });
    const send = () =>
      serverSnapshot(gateway, window).then(
        (snapshot) => {
          if (!res.writableEnded && !res.destroyed) res.write(`event: snapshot\ndata: ${JSON.stringify(snapshot)}\n\n`);
        },
        () => {}, // this tick has no snapshot; the next one tries again
      );
    // The credential was checked when the stream opened; check it again before each snapshot so
    // that a revoked key or an expired JWT ends a stream that would otherwise run for days.
    const credential = req.auth?.token;
    const tick = () => {
      if (!login || credential === undefined) return send();
      login.authenticator.verifyAccessToken(credential).then(
        () => send(),
        () => res.end(),
      );
    };
    send();
    const timer = setInterval(tick, TICK_MS);
    streams.add(res);
    const stop = () => {
      clearInterval(timer);
      streams.delete(res);
    };
    req.once('close', stop);
    res.once('close', stop);
  });

  return () => {
    for (const res of streams) res.end();
    streams.clear();
  };
}
