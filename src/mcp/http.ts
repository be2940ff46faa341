import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  localhostHostValidation,
  localhostOriginValidation,
  NodeStreamableHTTPServerTransport,
  toNodeHandler,
  toWebRequest,
} from '@modelcontextprotocol/node';
import { createMcpHandler, isLegacyRequest } from '@modelcontextprotocol/server';
import type { Gateway } from '../gateway.js';
import { runWithConnectionSignal } from './connection-signal.js';
import { createMcpServer } from './server.js';

/**
 * MCP Streamable HTTP at /mcp. 2026-07-28 clients are served statelessly by the SDK's
 * createMcpHandler (one server per request; a client cancels by closing its request). 2025-era
 * clients get sessions: one server per session, so `notifications/cancelled` reaches the request
 * it names and a session pays for its server once. Host and Origin are checked against localhost
 * to block DNS rebinding.
 */

export interface HttpServerHandle {
  server: Server;
  url: string;
  close: () => Promise<void>;
}

/** Sessions unused this long are closed (clients that never send DELETE). */
const SESSION_IDLE_MS = 30 * 60 * 1000;

interface Session {
  transport: NodeStreamableHTTPServerTransport;
  lastUsed: number;
}

export async function serveHttp(gateway: Gateway, port: number, host = '127.0.0.1'): Promise<HttpServerHandle> {
  // The SDK's default body cap (4 MiB, applied by the node adapter and by the handler) is below
  // one inline 3x512x512 float32 image in base64.
  const maxRequestBodySize = gateway.config.maxHttpBodyBytes;
  const modern = toNodeHandler(
    createMcpHandler(() => createMcpServer(gateway), { legacy: 'reject', maxRequestBodySize }),
    { maxRequestBodySize },
  );
  const sessions = new Map<string, Session>();
  const validateHost = localhostHostValidation();
  const validateOrigin = localhostOriginValidation();

  async function handleMcp(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = req.method === 'POST' ? await readJson(req, res, maxRequestBodySize) : undefined;
    if (body === INVALID) return;
    const sessionId = req.headers['mcp-session-id'];
    const session = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
    if (session) {
      session.lastUsed = Date.now();
      await session.transport.handleRequest(req, res, body);
      return;
    }
    if (!(await isLegacyRequest(await toWebRequest(req, body), body))) {
      await modern(req, res, body);
      return;
    }
    if (typeof sessionId === 'string') {
      jsonRpcError(res, 404, -32001, `unknown or expired session ${sessionId}; initialize a new one`);
      return;
    }
    const transport: NodeStreamableHTTPServerTransport = new NodeStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, lastUsed: Date.now() });
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await createMcpServer(gateway).connect(transport);
    await transport.handleRequest(req, res, body);
  }

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
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    runWithConnectionSignal(gone.signal, () =>
      handleMcp(req, res).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: (err as Error).message }));
      }),
    );
  });

  // Idle keep-alive sockets outlive the clients' own pools (undici keeps them ~4 s): a server that
  // closes first can race a request that the client is just sending on that socket.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;

  const sweeper = setInterval(() => {
    const cutoff = Date.now() - SESSION_IDLE_MS;
    for (const session of sessions.values()) if (session.lastUsed < cutoff) void session.transport.close();
  }, 60_000).unref();

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  return {
    server,
    url: `http://${host}:${address.port}/mcp`,
    close: async () => {
      clearInterval(sweeper);
      await Promise.allSettled([...sessions.values()].map((s) => s.transport.close()));
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const INVALID = Symbol('invalid body');

/** Reads and parses a JSON body (bounded); answers 413 / a JSON-RPC parse error itself when it cannot. */
async function readJson(req: IncomingMessage, res: ServerResponse, limit: number): Promise<unknown | typeof INVALID> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      jsonRpcError(res, 413, -32000, `Payload Too Large: Request body must not exceed ${limit} bytes`);
      req.resume();
      return INVALID;
    }
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (err) {
    jsonRpcError(res, 400, -32700, `Parse error: ${(err as Error).message}`);
    return INVALID;
  }
}

function jsonRpcError(res: ServerResponse, status: number, code: number, message: string): void {
  res
    .writeHead(status, { 'content-type': 'application/json' })
    .end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}
