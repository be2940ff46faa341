import { readFileSync } from 'node:fs';
import { createServer, type RequestListener, type Server } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import type { SecureVersion } from 'node:tls';

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
