import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { localhostHostValidation, localhostOriginValidation, toNodeHandler } from '@modelcontextprotocol/node';
import { createMcpHandler } from '@modelcontextprotocol/server';
import type { Gateway } from '../gateway.js';
import { createMcpServer } from './server.js';

/**
 * MCP Streamable HTTP at /mcp, serving both the 2026-07-28 (stateless) and the 2025-era protocol
 * from one server factory. Host and Origin are checked against localhost to block DNS rebinding.
 */

export interface HttpServerHandle {
  server: Server;
  url: string;
  close: () => Promise<void>;
}

export async function serveHttp(gateway: Gateway, port: number, host = '127.0.0.1'): Promise<HttpServerHandle> {
  // The SDK's default body cap (4 MiB, applied by the node adapter and by the handler) is below
  // one inline 3x512x512 float32 image in base64.
  const maxRequestBodySize = gateway.config.maxHttpBodyBytes;
  const handler = toNodeHandler(
    createMcpHandler(() => createMcpServer(gateway), { maxRequestBodySize }),
    {
      maxRequestBodySize,
    },
  );
  const validateHost = localhostHostValidation();
  const validateOrigin = localhostOriginValidation();
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 'ok' }));
      return;
    }
    if (path !== '/mcp') {
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ error: 'not found; MCP is at /mcp' }));
      return;
    }
    if (!validateHost(req, res) || !validateOrigin(req, res)) return;
    handler(req, res).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: (err as Error).message }));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  return {
    server,
    url: `http://${host}:${address.port}/mcp`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
