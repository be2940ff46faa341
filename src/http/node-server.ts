import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
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

export function createNodeServer(tls: TlsOptions | undefined, listener: RequestListener): Server {
  const server: Server = tls
    ? createTlsServer(
        { cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile), minVersion: tls.minVersion },
        listener,
      )
    : createServer(listener);
  // Idle keep-alive sockets outlive the clients' own pools (undici keeps them ~4 s): a server that
  // closes first can race a request that the client is just sending on that socket.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  return server;
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
