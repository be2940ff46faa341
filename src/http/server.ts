import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { localhostHostValidation, localhostOriginValidation } from '@modelcontextprotocol/node';
import FindMyWay from 'find-my-way';
import type { Gateway } from '../gateway.js';
import { createMcpHttpHandler } from '../mcp/http.js';
import { registerOipRoutes } from '../oip/routes.js';
import { registerDashboardRoutes } from './dashboard.js';

/**
 * The one HTTP server: MCP Streamable HTTP at /mcp, the Open Inference Protocol v2 under /v2,
 * Prometheus metrics at /metrics, the live dashboard under /dashboard, and /healthz. Routing is find-my-way (fastify's router) over plain node:http, so each adapter gets
 * the raw request and response and no framework sits on the tensor path. Host and Origin are
 * checked against localhost on every route, which blocks DNS rebinding from a browser.
 */

export interface HttpServerHandle {
  server: Server;
  url: string;
  /** Base URL of the OIP v2 routes (what tritonclient calls the server URL, without the scheme). */
  oipUrl: string;
  close: () => Promise<void>;
}

export async function serveHttp(gateway: Gateway, port: number, host = '127.0.0.1'): Promise<HttpServerHandle> {
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
  router.on('GET', '/metrics', (_req, res) => {
    gateway.metrics.render().then(
      ({ text, contentType }) => res.writeHead(200, { 'content-type': contentType }).end(text),
      (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err)),
    );
  });
  const closeOip = registerOipRoutes(router, gateway);
  const closeDashboard = registerDashboardRoutes(router, gateway);

  const validateHost = localhostHostValidation();
  const validateOrigin = localhostOriginValidation();
  const server = createServer((req, res) => {
    if (!validateHost(req, res) || !validateOrigin(req, res)) return;
    router.lookup(req, res);
  });

  // Idle keep-alive sockets outlive the clients' own pools (undici keeps them ~4 s): a server that
  // closes first can race a request that the client is just sending on that socket.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  return {
    server,
    url: `http://${host}:${address.port}/mcp`,
    oipUrl: `${host}:${address.port}`,
    close: async () => {
      await mcp.close();
      closeOip();
      closeDashboard();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
