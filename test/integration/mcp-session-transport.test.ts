import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { NodeSessionTransport } from '../../src/mcp/session-transport.js';

/**
 * tensorgate's Streamable HTTP session transport on a real node:http server with a real McpServer,
 * reached by the MCP SDK's own client and by raw HTTP for what a client library never sends
 * (wrong headers, unknown sessions, a second GET stream). Sessions are routed by id the way
 * src/mcp/http.ts routes them.
 */

const KEEP_ALIVE_MS = 40;

function mcpServer(): McpServer {
  const server = new McpServer({ name: 'transport-test', version: '0.0.0' });
  server.registerTool('echo', { inputSchema: z.object({ text: z.string() }) }, async ({ text }) => ({
    content: [{ type: 'text', text }],
  }));
  // Reports progress, then answers after `ms`: the stream must flush the notifications before the answer.
  server.registerTool(
    'slow',
    { inputSchema: z.object({ ms: z.number(), steps: z.number() }) },
    async ({ ms, steps }, ctx) => {
      const token = ctx.mcpReq._meta?.progressToken;
      for (let i = 1; i <= steps; i++) {
        if (token !== undefined) {
          await ctx.mcpReq.notify({
            method: 'notifications/progress',
            params: { progressToken: token, progress: i, total: steps },
          });
        }
        await new Promise((r) => setTimeout(r, ms / steps));
      }
      return { content: [{ type: 'text', text: `slept ${ms} ms` }] };
    },
  );
  // Sends a notification tied to no request: it goes to the session's GET stream.
  server.registerTool('announce', { inputSchema: z.object({}) }, async () => {
    await server.sendToolListChanged();
    return { content: [{ type: 'text', text: 'announced' }] };
  });
  return server;
}

let http: Server;
let base: string;
const sessions = new Map<string, NodeSessionTransport>();

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  let body: unknown;
  if (req.method === 'POST') {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  }
  const id = req.headers['mcp-session-id'];
  const session = typeof id === 'string' ? sessions.get(id) : undefined;
  if (session) return session.handleRequest(req, res, body);
  if (typeof id === 'string') {
    res.writeHead(404).end();
    return;
  }
  const transport: NodeSessionTransport = new NodeSessionTransport({
    sessionIdGenerator: randomUUID,
    onsessioninitialized: (sid) => sessions.set(sid, transport),
    keepAliveMs: KEEP_ALIVE_MS,
  });
  transport.onclose = () => {
    if (transport.sessionId) sessions.delete(transport.sessionId);
  };
  await mcpServer().connect(transport);
  await transport.handleRequest(req, res, body);
}

before(async () => {
  http = createServer((req, res) => void handle(req, res));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`;
});

after(async () => {
  await Promise.all([...sessions.values()].map((t) => t.close()));
  http.closeAllConnections();
  await new Promise((resolve) => http.close(resolve));
});

async function connect(): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name: 'transport-test', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(base));
  await client.connect(transport);
  return { client, transport };
}

interface Raw {
  status: number;
  headers: IncomingMessage['headers'];
  body: string;
}

/** One HTTP request by node:http, body read whole (or until `cut` ms, for streams that stay open). */
function raw(method: string, headers: Record<string, string>, body?: unknown, cut?: number): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request(base, { method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      const done = () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text });
      res.on('end', done);
      if (cut !== undefined) {
        setTimeout(() => {
          done();
          req.destroy();
        }, cut);
      }
    });
    req.on('error', (err) => (cut === undefined ? reject(err) : undefined));
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

const JSON_AND_SSE = { accept: 'application/json, text/event-stream', 'content-type': 'application/json' };

async function openSession(): Promise<string> {
  const init = await raw('POST', JSON_AND_SSE, {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
  });
  assert.equal(init.status, 200, init.body);
  assert.equal(init.headers['content-type'], 'application/json');
  const sid = init.headers['mcp-session-id'];
  assert.equal(typeof sid, 'string');
  const result = messages(init)[0] as { id: number; result: { protocolVersion: string } };
  assert.equal(result.id, 1);
  assert.equal(result.result.protocolVersion, '2025-06-18');
  const initialized = await raw(
    'POST',
    { ...JSON_AND_SSE, 'mcp-session-id': sid as string },
    {
      jsonrpc: '2.0',
      method: 'notifications/initialized',
    },
  );
  assert.equal(initialized.status, 202);
  return sid as string;
}

/** The JSON-RPC messages of an SSE body, in order. */
function events(body: string): unknown[] {
  return body
    .split('\n\n')
    .filter((e) => e.includes('data: '))
    .map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)));
}

/** The JSON-RPC messages of a POST's answer, in either form the transport may choose. */
function messages(r: Raw): unknown[] {
  if (r.headers['content-type'] === 'application/json') return [JSON.parse(r.body)];
  assert.equal(r.headers['content-type'], 'text/event-stream');
  return events(r.body);
}

function errorOf(r: Raw): { code: number; message: string } {
  return (JSON.parse(r.body) as { error: { code: number; message: string } }).error;
}

describe('NodeSessionTransport (Streamable HTTP sessions)', () => {
  it('serves the SDK client: initialize, tools/list, calls, and calls in flight together', async () => {
    const { client } = await connect();
    const tools = await client.listTools();
    assert.deepEqual(tools.tools.map((t) => t.name).sort(), ['announce', 'echo', 'slow']);
    const calls = await Promise.all(
      Array.from({ length: 8 }, (_, i) => client.callTool({ name: 'echo', arguments: { text: `call ${i}` } })),
    );
    assert.deepEqual(
      calls.map((c) => (c.content as { text: string }[])[0]?.text),
      Array.from({ length: 8 }, (_, i) => `call ${i}`),
    );
    await client.close();
  });

  it('flushes progress notifications on the request stream before its answer', async () => {
    const { client } = await connect();
    const progress: number[] = [];
    const result = await client.callTool(
      { name: 'slow', arguments: { ms: 120, steps: 3 } },
      { onprogress: (p) => progress.push(p.progress) },
    );
    assert.deepEqual(progress, [1, 2, 3]);
    assert.equal((result.content as { text: string }[])[0]?.text, 'slept 120 ms');
    await client.close();
  });

  it('answers a lone request as JSON, and opens a stream when something comes before the answer', async () => {
    const sid = await openSession();
    const session = { ...JSON_AND_SSE, 'mcp-session-id': sid };
    const call = (id: number, name: string, args: Record<string, unknown>, meta?: Record<string, unknown>) =>
      raw('POST', session, {
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) },
      });

    const lone = await call(20, 'echo', { text: 'plain' });
    assert.equal(lone.status, 200);
    assert.equal(lone.headers['content-type'], 'application/json');
    assert.equal(lone.headers['mcp-session-id'], sid);
    assert.deepEqual(JSON.parse(lone.body), {
      jsonrpc: '2.0',
      id: 20,
      result: { content: [{ type: 'text', text: 'plain' }] },
    });

    // Progress goes first, so the answer follows it on an event stream, in order.
    const streamed = await call(21, 'slow', { ms: 30, steps: 2 }, { progressToken: 'p' });
    assert.equal(streamed.headers['content-type'], 'text/event-stream');
    assert.equal(streamed.headers['mcp-session-id'], sid);
    const sent = events(streamed.body) as { id?: number; method?: string; params?: { progress: number } }[];
    assert.deepEqual(
      sent.map((m) => m.method ?? `answer ${m.id}`),
      ['notifications/progress', 'notifications/progress', 'answer 21'],
    );
    assert.deepEqual(
      sent.slice(0, 2).map((m) => m.params?.progress),
      [1, 2],
    );

    // The stream was that POST's alone: the session's next lone answer is JSON again.
    const quiet = await call(22, 'echo', { text: 'again' });
    assert.equal(quiet.headers['content-type'], 'application/json');
    assert.equal((JSON.parse(quiet.body) as { id: number }).id, 22);
  });

  it('carries notifications tied to no request on the GET stream, one stream per session', async () => {
    const sid = await openSession();
    const headers = { accept: 'text/event-stream', 'mcp-session-id': sid };
    const stream = raw('GET', headers, undefined, 400);
    await new Promise((r) => setTimeout(r, 100));
    const second = await raw('GET', headers);
    assert.equal(second.status, 409);
    assert.equal(errorOf(second).code, -32000);
    const call = await raw(
      'POST',
      { ...JSON_AND_SSE, 'mcp-session-id': sid },
      {
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'announce', arguments: {} },
      },
    );
    assert.equal((messages(call)[0] as { id: number }).id, 2);
    const got = await stream;
    assert.equal(got.status, 200);
    assert.equal(got.headers['content-type'], 'text/event-stream');
    assert.ok(
      events(got.body).some((m) => (m as { method?: string }).method === 'notifications/tools/list_changed'),
      got.body,
    );
    assert.match(got.body, /: keepalive\n\n/);
  });

  it('keeps a slow request stream alive with comments', async () => {
    const sid = await openSession();
    const r = await raw(
      'POST',
      { ...JSON_AND_SSE, 'mcp-session-id': sid },
      {
        jsonrpc: '2.0',
        id: 3,
        method: 'tools/call',
        params: { name: 'slow', arguments: { ms: KEEP_ALIVE_MS * 4, steps: 1 } },
      },
    );
    assert.equal(r.status, 200);
    assert.match(r.body, /: keepalive\n\n/);
    const answer = events(r.body).at(-1) as { id: number; result: { content: { text: string }[] } };
    assert.equal(answer.id, 3);
    assert.equal(answer.result.content[0]?.text, `slept ${KEEP_ALIVE_MS * 4} ms`);
  });

  it('answers a batch of requests on one stream, and notifications alone with 202', async () => {
    const sid = await openSession();
    const batch = await raw('POST', { ...JSON_AND_SSE, 'mcp-session-id': sid }, [
      { jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'echo', arguments: { text: 'A' } } },
      { jsonrpc: '2.0', id: 'b', method: 'ping' },
    ]);
    assert.equal(batch.status, 200);
    assert.equal(batch.headers['content-type'], 'text/event-stream');
    assert.deepEqual((events(batch.body) as { id: string }[]).map((m) => m.id).sort(), ['a', 'b']);
    const note = await raw(
      'POST',
      { ...JSON_AND_SSE, 'mcp-session-id': sid },
      {
        jsonrpc: '2.0',
        method: 'notifications/cancelled',
        params: { requestId: 'gone' },
      },
    );
    assert.equal(note.status, 202);
    assert.equal(note.body, '');
  });

  it('refuses what the SDK transport refuses, with the same statuses and JSON-RPC errors', async () => {
    const sid = await openSession();
    const call = { jsonrpc: '2.0', id: 9, method: 'ping' };
    const session = { 'mcp-session-id': sid };
    const cases: [string, Raw, number, number, RegExp][] = [
      [
        'json only',
        await raw('POST', { ...JSON_AND_SSE, ...session, accept: 'application/json' }, call),
        406,
        -32000,
        /Not Acceptable/,
      ],
      [
        'text body',
        await raw('POST', { ...JSON_AND_SSE, ...session, 'content-type': 'text/plain' }, call),
        415,
        -32000,
        /Unsupported Media Type/,
      ],
      [
        'not JSON-RPC',
        await raw('POST', { ...JSON_AND_SSE, ...session }, { hello: 1 }),
        400,
        -32700,
        /Invalid JSON-RPC message/,
      ],
      [
        'batch too big',
        await raw(
          'POST',
          { ...JSON_AND_SSE, ...session },
          Array.from({ length: 101 }, () => call),
        ),
        400,
        -32600,
        /Batch must not exceed 100/,
      ],
      [
        'bad version',
        await raw('POST', { ...JSON_AND_SSE, ...session, 'mcp-protocol-version': '1999-01-01' }, call),
        400,
        -32000,
        /Unsupported protocol version: 1999-01-01/,
      ],
      [
        'second initialize',
        await raw(
          'POST',
          { ...JSON_AND_SSE, ...session },
          {
            ...call,
            method: 'initialize',
            params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '0' } },
          },
        ),
        400,
        -32600,
        /already initialized/,
      ],
      [
        'GET without SSE',
        await raw('GET', { accept: 'application/json', ...session }),
        406,
        -32000,
        /must accept text\/event-stream/,
      ],
      ['PUT', await raw('PUT', { ...JSON_AND_SSE, ...session }, call), 405, -32000, /Method not allowed/],
      ['no session yet', await raw('POST', JSON_AND_SSE, call), 400, -32000, /Server not initialized/],
    ];
    for (const [what, r, status, code, message] of cases) {
      assert.equal(r.status, status, `${what}: ${r.body}`);
      assert.equal(errorOf(r).code, code, what);
      assert.match(errorOf(r).message, message, what);
    }
    assert.equal((await raw('PUT', { ...JSON_AND_SSE, ...session }, call)).headers.allow, 'GET, POST, DELETE');
    // The session is still good after all of that.
    const ping = await raw('POST', { ...JSON_AND_SSE, ...session }, call);
    assert.deepEqual(messages(ping), [{ jsonrpc: '2.0', id: 9, result: {} }]);
  });

  it('ends the session on DELETE', async () => {
    const sid = await openSession();
    const session = { 'mcp-session-id': sid };
    assert.ok(sessions.has(sid));
    const del = await raw('DELETE', { ...JSON_AND_SSE, ...session });
    assert.equal(del.status, 200);
    assert.ok(!sessions.has(sid), 'the session is forgotten');
    const after = await raw('POST', { ...JSON_AND_SSE, ...session }, { jsonrpc: '2.0', id: 1, method: 'ping' });
    assert.equal(after.status, 404);
  });

  it('goes on serving after a client leaves mid-request', async () => {
    const sid = await openSession();
    const session = { ...JSON_AND_SSE, 'mcp-session-id': sid };
    const left = await raw(
      'POST',
      session,
      { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'slow', arguments: { ms: 150, steps: 1 } } },
      KEEP_ALIVE_MS,
    );
    assert.equal(left.status, 200, 'the first keep-alive comment opened the stream');
    await new Promise((r) => setTimeout(r, 250)); // the answer comes for a stream that is gone
    const next = await raw('POST', session, {
      jsonrpc: '2.0',
      id: 6,
      method: 'tools/call',
      params: { name: 'echo', arguments: { text: 'still here' } },
    });
    const answer = messages(next)[0] as { id: number; result: { content: { text: string }[] } };
    assert.equal(answer.id, 6);
    assert.equal(answer.result.content[0]?.text, 'still here');
  });
});
