import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/**
 * Browser sessions for the dashboard. A browser cannot put a bearer credential on a page load or
 * an EventSource, so the page posts the credential once to /dashboard/login and gets an opaque,
 * random session id in an HttpOnly, SameSite=Strict cookie scoped to /dashboard. The credential
 * stays in this process's memory, never in the browser, and is verified again on every request:
 * a revoked key or an expired JWT ends its sessions at once. Sessions open only the dashboard's
 * read-only API; every other route still needs the bearer header.
 */

export const SESSION_COOKIE = 'tg_session';
/** A session lasts at most this long, or until its credential expires if that is sooner. */
const SESSION_TTL_MS = 8 * 3600 * 1000;
/** Sessions kept at once; the oldest is dropped past it (each login makes one). */
const MAX_SESSIONS = 1000;

interface Session {
  token: string;
  expiresAt: number;
}

export class DashboardSessions {
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Opens a session for a verified credential; returns its id and lifetime in seconds. */
  open(token: string, credentialExpiresAtS?: number): { id: string; maxAgeS: number } {
    const now = this.now();
    const expiresAt = Math.min(now + SESSION_TTL_MS, (credentialExpiresAtS ?? Number.POSITIVE_INFINITY) * 1000);
    if (this.sessions.size >= MAX_SESSIONS) {
      // Maps iterate in insertion order: the first key is the oldest session.
      const oldest = this.sessions.keys().next().value;
      if (oldest !== undefined) this.sessions.delete(oldest);
    }
    const id = randomBytes(32).toString('base64url');
    this.sessions.set(id, { token, expiresAt });
    return { id, maxAgeS: Math.max(1, Math.floor((expiresAt - now) / 1000)) };
  }

  /** The credential behind the request's session cookie, if it has a live one. */
  tokenOf(req: IncomingMessage): string | undefined {
    const id = sessionIdOf(req);
    if (id === undefined) return undefined;
    const session = this.sessions.get(id);
    if (!session) return undefined;
    if (session.expiresAt <= this.now()) {
      this.sessions.delete(id);
      return undefined;
    }
    return session.token;
  }

  close(req: IncomingMessage): void {
    const id = sessionIdOf(req);
    if (id !== undefined) this.sessions.delete(id);
  }

  get size(): number {
    return this.sessions.size;
  }
}

function sessionIdOf(req: IncomingMessage): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [name, value] = part.trim().split('=', 2);
    if (name === SESSION_COOKIE && value) return value;
  }
  return undefined;
}

/** The Set-Cookie value: opaque id, only for /dashboard, never readable by scripts or sent cross-site. */
export function sessionCookie(id: string, maxAgeS: number, secure: boolean): string {
  return `${SESSION_COOKIE}=${id}; Path=/dashboard; HttpOnly; SameSite=Strict; Max-Age=${maxAgeS}${secure ? '; Secure' : ''}`;
}
