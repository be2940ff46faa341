import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  type AuthInfo,
  isInitializeRequest,
  isJsonContentType,
  type JSONRPCMessage,
  type MessageExtraInfo,
  parseJSONRPCMessage,
  type RequestId,
  SUPPORTED_PROTOCOL_VERSIONS,
  type Transport,
  type TransportSendOptions,
} from '@modelcontextprotocol/server';

/**
 * MCP Streamable HTTP for one session of the 2025 protocol era, on Node's own request and
 * response objects.
 *
 * The SDK's NodeStreamableHTTPServerTransport converts every Node request into a web Request and
 * pipes a web ReadableStream back into the Node response, and checks each message's kind by
 * running its zod schemas again; that was about 0.3 ms of the gateway's CPU per call, more than
 * the rest of a small model's call. This transport keeps the SDK's behaviour on the wire (the
 * same checks, status codes and JSON-RPC errors, the GET stream for messages not tied to a
 * request, DELETE ending the session, keep-alive comments) without the conversions.
 *
 * A POST that carries requests is answered in one of the two forms the protocol lets a server
 * choose per POST, decided when something is first to be sent on it: a lone request whose answer
 * is that first thing gets the answer as plain `application/json`, in one `end()` with its
 * headers; anything sent before an answer (progress, logging, a keep-alive) opens an SSE stream,
 * and so does a batch of requests. The SDK's own 2026-07-28 handler does the same by default
 * (`responseMode: 'auto'`). A JSON answer spares the client its event-stream parser, which for the
 * SDK's fetch-based client is a chain of web streams: about 0.1 ms per call on a 2-core VM
 * (docs/architecture.md).
 *
 * What it leaves out is the SDK's opt-in resumability (an event store), which tensorgate does not
 * configure. Messages are validated with the SDK's own schema (`parseJSONRPCMessage`); the server
 * validates each request's params as it always does.
 */

/** The SDK's bound on the messages of one JSON-RPC batch. */
const MAX_BATCH_SIZE = 100;
/** As the SDK: a comment on open streams this often, so that proxies keep them. */
const KEEP_ALIVE_MS = 15_000;

const SSE_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};
const JSON_HEADERS = { 'content-type': 'application/json' };

/** The response of one POST (JSON or an SSE stream): the requests it carried and how many have been answered. */
interface PostStream {
  res: ServerResponse;
  requests: number;
  answered: number;
  /** The client went away: what is still sent for it is dropped. */
  gone: boolean;
}

export interface SessionTransportOptions {
  sessionIdGenerator: () => string;
  onsessioninitialized?: (sessionId: string) => void;
  keepAliveMs?: number;
}

export class NodeSessionTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;
  sessionId?: string;

  private readonly streams = new Map<RequestId, PostStream>();
  private standalone: ServerResponse | undefined;
  private supportedVersions: string[] = [...SUPPORTED_PROTOCOL_VERSIONS];
  private initialized = false;
  private closed = false;
  private started = false;
  private keepAlive: NodeJS.Timeout | undefined;
  /** The response headers of each form, with the session's id once it has one (built once, not per answer). */
  private sseHeaders: Record<string, string> = SSE_HEADERS;
  private jsonHeaders: Record<string, string> = JSON_HEADERS;

  constructor(private readonly options: SessionTransportOptions) {}

  async start(): Promise<void> {
    if (this.started) throw new Error('Transport already started');
    this.started = true;
    const every = this.options.keepAliveMs ?? KEEP_ALIVE_MS;
    this.keepAlive = setInterval(() => this.sendKeepAlive(), every);
    this.keepAlive.unref();
  }

  /** Called by the server on connect: the versions the MCP-Protocol-Version header may name. */
  setSupportedProtocolVersions(versions: string[]): void {
    this.supportedVersions = versions;
  }

  /** Answers one HTTP request of this session; `body` is the parsed JSON of a POST. */
  async handleRequest(req: IncomingMessage, res: ServerResponse, body?: unknown): Promise<void> {
    if (this.closed) return this.refuse(res, 404, -32001, 'Session not found');
    switch (req.method) {
      case 'POST':
        return this.post(req, res, body);
      case 'GET':
        return this.get(req, res);
      case 'DELETE':
        return this.delete(req, res);
      default:
        return this.refuse(res, 405, -32000, 'Method not allowed.', { allow: 'GET, POST, DELETE' });
    }
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    const response = isResponse(message);
    const requestId = response ? (message as { id: RequestId }).id : options?.relatedRequestId;
    if (requestId === undefined) {
      if (response)
        throw new Error('Cannot send a response on a standalone SSE stream unless resuming a previous client request');
      if (this.standalone) await this.write(this.standalone, event(message), false);
      return;
    }
    const stream = this.streams.get(requestId);
    if (!stream) throw new Error(`No connection established for request ID: ${String(requestId)}`);
    let last = false;
    if (response) {
      this.streams.delete(requestId);
      stream.answered += 1;
      last = stream.answered === stream.requests;
    }
    if (stream.gone) {
      if (last)
        this.onerror?.(
          new Error(`Response for request ID ${String(requestId)} is undeliverable: its stream is disconnected`),
        );
      return;
    }
    if (last && stream.requests === 1 && !stream.res.headersSent) {
      // The POST's one answer, and nothing went before it: plain JSON (see the class comment).
      stream.res.writeHead(200, this.jsonHeaders).end(JSON.stringify(message));
      return;
    }
    await this.write(stream.res, event(message), last);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.keepAlive);
    for (const res of this.openResponses()) if (!res.writableEnded) res.end();
    this.streams.clear();
    this.standalone = undefined;
    this.onclose?.();
  }

  private async post(req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    const accept = req.headers.accept;
    if (!accept?.includes('application/json') || !accept.includes('text/event-stream')) {
      return this.refuse(
        res,
        406,
        -32000,
        'Not Acceptable: Client must accept both application/json and text/event-stream',
      );
    }
    if (!isJsonContentType(req.headers['content-type'] ?? null)) {
      return this.refuse(res, 415, -32000, 'Unsupported Media Type: Content-Type must be application/json');
    }
    if (Array.isArray(body) && body.length > MAX_BATCH_SIZE) {
      return this.refuse(res, 400, -32600, `Invalid Request: Batch must not exceed ${MAX_BATCH_SIZE} messages`);
    }
    let messages: JSONRPCMessage[];
    try {
      messages = Array.isArray(body) ? body.map((m) => parseJSONRPCMessage(m)) : [parseJSONRPCMessage(body)];
    } catch (err) {
      this.onerror?.(err as Error);
      return this.refuse(res, 400, -32700, 'Parse error: Invalid JSON-RPC message', {}, false);
    }
    // The SDK's schema check, only for what names the method: the rest are classified by shape,
    // which the message schema has already settled.
    const initializing = messages.some((m) => 'method' in m && m.method === 'initialize' && isInitializeRequest(m));
    if (initializing) {
      if (this.initialized && this.sessionId !== undefined) {
        return this.refuse(res, 400, -32600, 'Invalid Request: Server already initialized');
      }
      if (messages.length > 1) {
        return this.refuse(res, 400, -32600, 'Invalid Request: Only one initialization request is allowed');
      }
      this.sessionId = this.options.sessionIdGenerator();
      this.sseHeaders = { ...SSE_HEADERS, 'mcp-session-id': this.sessionId };
      this.jsonHeaders = { ...JSON_HEADERS, 'mcp-session-id': this.sessionId };
      this.initialized = true;
      this.options.onsessioninitialized?.(this.sessionId);
    } else if (!this.validSession(req, res)) {
      return;
    }
    const extra: MessageExtraInfo = { authInfo: (req as IncomingMessage & { auth?: AuthInfo }).auth };
    const requests = messages.filter(isRequest);
    if (requests.length === 0) {
      for (const message of messages) this.onmessage?.(message, extra);
      res.writeHead(202).end();
      return;
    }
    const stream: PostStream = { res, requests: requests.length, answered: 0, gone: false };
    for (const request of requests) this.streams.set(request.id, stream);
    res.on('close', () => {
      if (!res.writableFinished) stream.gone = true;
    });
    for (const message of messages) this.onmessage?.(message, extra);
  }

  private async get(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!req.headers.accept?.includes('text/event-stream')) {
      return this.refuse(res, 406, -32000, 'Not Acceptable: Client must accept text/event-stream');
    }
    if (!this.validSession(req, res)) return;
    if (this.standalone) {
      return this.refuse(res, 409, -32000, 'Conflict: Only one SSE stream is allowed per session');
    }
    res.writeHead(200, this.sseHeaders);
    res.flushHeaders();
    this.standalone = res;
    res.on('close', () => {
      if (this.standalone === res) this.standalone = undefined;
    });
  }

  private async delete(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!this.validSession(req, res)) return;
    res.writeHead(200).end();
    await this.close();
  }

  /** The session and protocol-version checks of every request but `initialize`, answered when they fail. */
  private validSession(req: IncomingMessage, res: ServerResponse): boolean {
    if (!this.initialized) {
      this.refuse(res, 400, -32000, 'Bad Request: Server not initialized');
      return false;
    }
    const sessionId = req.headers['mcp-session-id'];
    if (!sessionId) {
      this.refuse(res, 400, -32000, 'Bad Request: Mcp-Session-Id header is required');
      return false;
    }
    if (sessionId !== this.sessionId) {
      this.refuse(res, 404, -32001, 'Session not found');
      return false;
    }
    const version = req.headers['mcp-protocol-version'];
    if (typeof version === 'string' && !this.supportedVersions.includes(version)) {
      this.refuse(
        res,
        400,
        -32000,
        `Bad Request: Unsupported protocol version: ${version} (supported versions: ${this.supportedVersions.join(', ')})`,
      );
      return false;
    }
    return true;
  }

  /** A JSON-RPC error for the whole HTTP request (no id: it may carry several messages or none). */
  private refuse(
    res: ServerResponse,
    status: number,
    code: number,
    message: string,
    headers: Record<string, string> = {},
    report = true,
  ): void {
    if (report) this.onerror?.(new Error(message));
    res
      .writeHead(status, { ...headers, 'content-type': 'application/json' })
      .end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
  }

  /** The responses still open: the POSTs' streams whose client is there, and the GET's. */
  private openResponses(): Set<ServerResponse> {
    const open = new Set([...this.streams.values()].filter((s) => !s.gone).map((s) => s.res));
    if (this.standalone) open.add(this.standalone);
    return open;
  }

  private sendKeepAlive(): void {
    for (const res of this.openResponses()) {
      if (!res.headersSent) res.writeHead(200, this.sseHeaders);
      if (!res.writableEnded) res.write(': keepalive\n\n');
    }
  }

  /**
   * Writes an SSE event to a POST's or the GET's stream, with the headers when they have not gone
   * yet (the first event leaves in the same write), ending the stream after the last answer;
   * resolves once the socket can take more.
   */
  private write(res: ServerResponse, data: string, last: boolean): Promise<void> {
    if (res.writableEnded) return Promise.resolve();
    if (!res.headersSent) res.writeHead(200, this.sseHeaders);
    if (last) {
      res.end(data);
      return Promise.resolve();
    }
    if (res.write(data)) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        res.off('drain', done);
        res.off('close', done);
        resolve();
      };
      res.on('drain', done);
      res.on('close', done);
    });
  }
}

function isResponse(message: JSONRPCMessage): boolean {
  return 'id' in message && ('result' in message || 'error' in message);
}

function isRequest(message: JSONRPCMessage): message is JSONRPCMessage & { id: RequestId; method: string } {
  return 'method' in message && 'id' in message;
}

function event(message: JSONRPCMessage): string {
  return `event: message\ndata: ${JSON.stringify(message)}\n\n`;
}
