import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { NodeStreamableHTTPServerTransport, toNodeHandler } from '@modelcontextprotocol/node';
import { classifyInboundRequest, createMcpHandler } from '@modelcontextprotocol/server';
import type { TensorgateError } from '../errors.js';
import type { Gateway } from '../gateway.js';
import { readBodyText } from '../http/body.js';
import { runWithConnectionSignal } from './connection-signal.js';
import { createMcpServer } from './server.js';
import { NodeSessionTransport } from './session-transport.js';

/**
 * MCP Streamable HTTP at /mcp. 2026-07-28 clients are served statelessly by the SDK's
 * createMcpHandler (one server per request; a client cancels by closing its request). 2025-era
 * clients get sessions: one server per session, so `notifications/cancelled` reaches the request
 * it names and a session pays for its server once; a session's transport is tensorgate's own
 * (session-transport.ts), which answers on Node's request and response without the SDK's
 * web-stream conversions. The HTTP server itself (src/http/server.ts) checks Host and Origin for
 * every route.
 */

/** Sessions unused this long are closed (clients that never send DELETE). */
const SESSION_IDLE_MS = 30 * 60 * 1000;

interface Session {
  transport: NodeSessionTransport;
  lastUsed: number;
}

export interface McpHttpHandler {
  handle: (req: IncomingMessage, res: ServerResponse) => void;
  close: () => Promise<void>;
}

/** The /mcp route: Streamable HTTP in both protocol eras (see above). */
export function createMcpHttpHandler(gateway: Gateway): McpHttpHandler {
  // The SDK's default body cap (4 MiB, applied by the node adapter and by the handler) is below
  // one inline 3x512x512 float32 image in base64.
  const maxRequestBodySize = gateway.config.maxHttpBodyBytes;
  const modern = toNodeHandler(
    createMcpHandler(() => createMcpServer(gateway), { legacy: 'reject', maxRequestBodySize }),
    { maxRequestBodySize },
  );
  const sessions = new Map<string, Session>();
  const replica = gateway.config.replicaId;

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
    if (!isLegacy(req, body)) {
      await modern(req, res, body);
      return;
    }
    if (typeof sessionId === 'string') {
      if (madeElsewhere(sessionId, replica)) {
        await serveStatelessly(req, res, body);
        return;
      }
      jsonRpcError(res, 404, -32001, `unknown or expired session ${sessionId}; initialize a new one`);
      return;
    }
    const transport: NodeSessionTransport = new NodeSessionTransport({
      // Named after the replica, so that a replica reached with another's session can say so.
      sessionIdGenerator: () => (replica === undefined ? randomUUID() : `${replica}.${randomUUID()}`),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, lastUsed: Date.now() });
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await createMcpServer(gateway, { live: true }).connect(transport);
    await transport.handleRequest(req, res, body);
  }

  /**
   * A request of a session another replica opened (a round-robin balancer sent it here): served
   * by a server of its own for this one request, as the stateless era is. What a session adds
   * beyond that (cancelling by notification, the GET stream) stays with the replica holding it.
   */
  async function serveStatelessly(req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    const transport = new NodeStreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => void transport.close());
    await createMcpServer(gateway).connect(transport);
    await transport.handleRequest(req, res, body);
  }

  const sweeper = setInterval(() => {
    const cutoff = Date.now() - SESSION_IDLE_MS;
    for (const session of sessions.values()) if (session.lastUsed < cutoff) void session.transport.close();
  }, 60_000).unref();

  return {
    handle: (req, res) => {
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
    },
    close: async () => {
      clearInterval(sweeper);
      await Promise.allSettled([...sessions.values()].map((s) => s.transport.close()));
    },
  };
}

/**
 * Whether the SDK's handler would serve this request as the 2025 era (`isLegacyRequest`), decided
 * from the Node request itself: `isLegacyRequest` takes a web Request, and converting the Node
 * request into one only to read three headers cost 0.09 ms of every 2026-07-28 call. The body
 * has been parsed already (readJson answers a POST without a JSON body itself).
 */
function isLegacy(req: IncomingMessage, body: unknown): boolean {
  const header = (name: string) => {
    const value = req.headers[name];
    return Array.isArray(value) ? value.join(', ') : value;
  };
  const outcome = classifyInboundRequest({
    httpMethod: (req.method ?? 'GET').toUpperCase(),
    protocolVersionHeader: header('mcp-protocol-version'),
    mcpMethodHeader: header('mcp-method'),
    mcpNameHeader: header('mcp-name'),
    ...(body !== undefined ? { body } : {}),
  });
  return outcome.kind === 'legacy';
}

const INVALID = Symbol('invalid body');

/** Reads and parses a JSON body (bounded); answers 413 / a JSON-RPC parse error itself when it cannot. */
async function readJson(req: IncomingMessage, res: ServerResponse, limit: number): Promise<unknown | typeof INVALID> {
  let body: string;
  try {
    body = await readBodyText(req, limit);
  } catch (err) {
    if ((err as TensorgateError).code === 'INPUT_TOO_LARGE') {
      req.resume(); // the rest unread, so that the refusal can still be answered
      jsonRpcError(res, 413, -32000, `Payload Too Large: Request body must not exceed ${limit} bytes`);
    } else res.destroy(); // the client went away mid-body: nobody to answer
    return INVALID;
  }
  try {
    return JSON.parse(body);
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

/**
 * Whether a session id names another replica: ids are `REPLICA.UUID` when the server has a
 * replica name (several replicas behind one address).
 */
function madeElsewhere(sessionId: string, replica: string | undefined): boolean {
  const dot = sessionId.lastIndexOf('.');
  return replica !== undefined && dot > 0 && sessionId.slice(0, dot) !== replica;
}
