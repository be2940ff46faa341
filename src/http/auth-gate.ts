import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type AuthInfo,
  bearerAuthChallengeResponse,
  getOAuthProtectedResourceMetadataUrl,
  verifyBearerToken,
} from '@modelcontextprotocol/server';
import type { Gateway } from '../gateway.js';
import type { Authenticator } from '../security/auth.js';
import { type HttpAnswer, writeAnswer } from './answer.js';
import type { DashboardSessions } from './dashboard-sessions.js';

declare module 'node:http' {
  interface IncomingMessage {
    /** The verified caller, set by the auth gate; the MCP node adapter hands it to the tools. */
    auth?: AuthInfo;
  }
}

/**
 * The gate in front of every HTTP route when auth is on, as the MCP authorization spec asks of a
 * resource server: a request without a valid bearer credential gets 401 with a `WWW-Authenticate`
 * challenge naming the RFC 9728 Protected Resource Metadata document, which is served here too.
 * Liveness and readiness stay open (orchestrators probe them without credentials; they reveal no
 * model or data).
 */

const PUBLIC_PATHS = new Set(['/healthz', '/v2/health/live', '/v2/health/ready']);
const METADATA_PATH = '/.well-known/oauth-protected-resource';

/** Liveness and readiness: open without credentials, and never rate-limited. */
export function isPublicPath(req: IncomingMessage): boolean {
  return PUBLIC_PATHS.has(pathOf(req));
}

function pathOf(req: IncomingMessage): string {
  return (req.url ?? '/').split('?')[0] as string;
}

/**
 * The dashboard's page, its static files, login and logout: they hold no data, and a browser
 * must reach them before it has a session. The data comes from /dashboard/api/*, which is guarded.
 */
function isDashboardShell(req: IncomingMessage): boolean {
  const path = pathOf(req).replace(/\/$/, '');
  if (req.method === 'POST') return path === '/dashboard/login' || path === '/dashboard/logout';
  return req.method === 'GET' && (path === '/dashboard' || path.startsWith('/dashboard/assets/'));
}

/** A verified caller, or the answer that refuses the credential. */
export type Admission = { auth: AuthInfo } | { refusal: HttpAnswer };

export interface AuthGate {
  /** True when the request may go on (req.auth is set); otherwise it has been answered. */
  admit(req: IncomingMessage, res: ServerResponse): Promise<boolean>;
  /**
   * Checks the bearer credential of a request to `path` from `remote` that another thread
   * received (the OIP data plane's); a refusal is audited like the gate's own.
   */
  verify(authorization: string | undefined, path: string, remote: string): Promise<Admission>;
}

/** A refused credential, for the audit log: where it was sent and why; never the credential. */
export interface AuthFailure {
  path: string;
  reason: string;
  remote: string;
}

export function createAuthGate(
  auth: Authenticator,
  resourceUrl: URL,
  onFailure: (failure: AuthFailure) => void = () => {},
  sessions?: DashboardSessions,
): AuthGate {
  const metadataUrl = getOAuthProtectedResourceMetadataUrl(resourceUrl);
  const metadataPaths = new Set([METADATA_PATH, new URL(metadataUrl).pathname]);
  const metadata = JSON.stringify({
    resource: resourceUrl.href,
    ...(auth.issuer ? { authorization_servers: [auth.issuer] } : {}),
    bearer_methods_supported: ['header'],
    resource_name: 'tensorgate',
  });

  const verify = async (header: string | undefined, path: string, remote: string): Promise<Admission> => {
    try {
      return { auth: await verifyBearerToken(header, { verifier: auth, resourceMetadataUrl: metadataUrl }) };
    } catch (err) {
      const challenge = bearerAuthChallengeResponse(err, { resourceMetadataUrl: metadataUrl });
      const body = (await challenge.json().catch(() => ({}))) as Record<string, unknown>;
      onFailure({ path, reason: String(body.error_description ?? body.error ?? 'refused'), remote });
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      challenge.headers.forEach((value, name) => {
        if (name !== 'content-type' && name !== 'content-length') headers[name] = value;
      });
      // The OAuth error fields (RFC 6750) for OAuth clients, plus tensorgate's stable code.
      const json = Buffer.from(JSON.stringify({ ...body, code: 'UNAUTHENTICATED' }));
      return { refusal: { status: challenge.status, headers, parts: [json] } };
    }
  };

  return {
    verify,
    async admit(req, res) {
      if (isPublicPath(req) || isDashboardShell(req)) return true;
      const path = pathOf(req);
      if (metadataPaths.has(path.replace(/\/$/, ''))) {
        res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'max-age=300' }).end(metadata);
        return false;
      }
      let header = req.headers.authorization;
      // A dashboard session stands in for the header on the dashboard's read-only API only.
      if (header === undefined && sessions && req.method === 'GET' && path.startsWith('/dashboard/api/')) {
        const token = sessions.tokenOf(req);
        if (token !== undefined) header = `Bearer ${token}`;
      }
      const admission = await verify(header, path, req.socket.remoteAddress ?? 'unknown');
      if ('refusal' in admission) {
        writeAnswer(res, admission.refusal);
        return false;
      }
      req.auth = admission.auth;
      return true;
    },
  };
}

/** /metrics and the dashboard name every model: they need read on `server:metrics`. */
export function mayReadMetrics(gateway: Gateway, req: IncomingMessage, res: ServerResponse): boolean {
  try {
    gateway.access.check(req.auth, 'read', 'server', 'metrics');
    return true;
  } catch (err) {
    res
      .writeHead(403, { 'content-type': 'application/json' })
      .end(JSON.stringify({ error: `FORBIDDEN: ${(err as Error).message}` }));
    return false;
  }
}
