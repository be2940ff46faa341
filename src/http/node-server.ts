import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type RequestListener, type Server, ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { Server as NetServer } from 'node:net';
import type { SecureVersion } from 'node:tls';
import { hostHeaderValidation, originValidation } from '@modelcontextprotocol/node';

/**
 * A node:http server, or node:https with a certificate, as every tensorgate HTTP port makes it:
 * the main server and the OIP data plane's threads. Kept apart from server.ts so that a thread
 * can make one without loading the routes.
 */

export interface TlsOptions {
  certFile: string;
  keyFile: string;
  minVersion: SecureVersion;
}

/** A port's server, and how it is stopped. */
export interface NodeServer {
  server: Server;
  drain: ServerDrain;
}

export function createNodeServer(tls: TlsOptions | undefined, listener: RequestListener): NodeServer {
  const intake = { open: true };
  // Every answer's headers go through writeHead (Node's implicit ones too): once intake has
  // stopped, each answer closes its connection, those to requests taken before included.
  class Response extends ServerResponse {
    override writeHead(statusCode: number, ...rest: unknown[]): this {
      if (!intake.open) this.shouldKeepAlive = false;
      return ServerResponse.prototype.writeHead.apply(this, [statusCode, ...rest] as never) as this;
    }
  }
  const server: Server = tls
    ? createTlsServer(
        {
          cert: readFileSync(tls.certFile),
          key: readFileSync(tls.keyFile),
          minVersion: tls.minVersion,
          ServerResponse: Response,
        },
        listener,
      )
    : createServer({ ServerResponse: Response }, listener);
  // Idle keep-alive sockets outlive the clients' own pools (undici keeps them ~4 s): a server that
  // closes first can race a request that the client is just sending on that socket.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  return { server, drain: new ServerDrain(server, intake) };
}

/** How often a finishing server closes the kept-alive connections that have gone idle. */
const IDLE_SWEEP_MS = 20;

/**
 * Stops a server in two steps, so that each client can tell what became of its requests: every
 * request it sent is answered, or its connection is refused (which a client knows it may retry
 * elsewhere), never reset midway.
 *
 * `stopIntake()`, as the server begins to stop: it stops listening, and every answer from then on
 * (to requests taken before too) carries `Connection: close`, so a kept-alive client's next
 * request goes to a new connection, which is refused. A connection idle at that moment is left
 * open: its client may be sending on it right then. (Node's `server.close()` closes those at
 * once, and lets the others serve request after request until their keep-alive timeout. Under
 * load that reset about one request per kept-alive client: ECONNRESET, which a client cannot tell
 * from a request lost midway.)
 *
 * `finish(graceMs)`, once the gateway has answered what was in flight, so that active clients have
 * been told to close: idle connections close now and as more go idle, and whatever is still open
 * after `graceMs` is cut. Resolves when every connection has closed.
 */
export class ServerDrain {
  private closed: Promise<void> | undefined;
  private sweep: NodeJS.Timeout | undefined;

  /** `intake` is read by the server's responses (createNodeServer). */
  constructor(
    private readonly server: Server,
    private readonly intake: { open: boolean },
  ) {}

  stopIntake(): void {
    if (this.closed) return;
    this.intake.open = false;
    // net.Server's close: it stops listening, and 'close' comes once every connection has closed.
    // http.Server's would also close the idle connections (see above), and stop its timer for
    // request timeouts, which is unref'd and stays with the server object.
    this.closed = new Promise((resolve) => NetServer.prototype.close.call(this.server, () => resolve()));
  }

  async finish(graceMs: number): Promise<void> {
    this.stopIntake();
    this.server.closeIdleConnections();
    this.sweep = setInterval(() => this.server.closeIdleConnections(), IDLE_SWEEP_MS);
    const cut = setTimeout(() => this.server.closeAllConnections(), graceMs);
    await this.closed;
    clearTimeout(cut);
    clearInterval(this.sweep);
  }
}

/** A host as a URL's authority writes it: IPv6 addresses in brackets. */
export function urlHost(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/** Host headers accepted that are remembered, so that a port's usual few are not parsed again. */
const KNOWN_HOSTS = 64;

/**
 * The MCP SDK's guard against DNS rebinding, for every request on a port: a Host header naming one
 * of `hostnames` (and an Origin, when there is one, naming one too); otherwise the SDK's 403. The
 * SDK parses the Host header as a URL on every request (about 1.4 µs, 1% of the main thread's work
 * per call at concurrency 32); a Host header accepted once is accepted again without that.
 */
export function requestGuard(hostnames: string[]): (req: IncomingMessage, res: ServerResponse) => boolean {
  const validateHost = hostHeaderValidation(hostnames);
  const validateOrigin = originValidation(hostnames);
  const accepted = new Set<string>();
  return (req, res) => {
    const host = req.headers.host;
    if (host === undefined || !accepted.has(host)) {
      if (!validateHost(req, res)) return false;
      if (host !== undefined && accepted.size < KNOWN_HOSTS) accepted.add(host);
    }
    return validateOrigin(req, res);
  };
}
