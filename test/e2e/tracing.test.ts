import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * OpenTelemetry spans from the real server, received by a real OTLP/HTTP endpoint on loopback
 * (the exporter's JSON encoding): one `tensorgate.infer` span per request, its stage children,
 * failures with status ERROR.
 */

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes?: { key: string; value: OtlpValue }[];
  status?: { code?: number; message?: string };
}
interface OtlpExport {
  resourceSpans: {
    resource?: { attributes?: { key: string; value: OtlpValue }[] };
    scopeSpans: { spans: OtlpSpan[] }[];
  }[];
}

const MODEL = 'tabular-classifier';
const exports: { contentType: string | undefined; body: OtlpExport }[] = [];
let collector: Server;
let server: Served;
let client: Client;

before(async () => {
  collector = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces') {
        exports.push({
          contentType: req.headers['content-type'],
          body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpExport,
        });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } else res.writeHead(404).end();
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
  const { port } = collector.address() as AddressInfo;
  server = await serveOne(MODEL, {
    serveArgs: ['--otlp-endpoint', `http://127.0.0.1:${port}`],
    env: { OTEL_BSP_SCHEDULE_DELAY: '100' },
  });
  client = new Client({ name: 'tracing-test', version: '0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  await server.waitForRecord((r) => r.msg.startsWith('ready: '), 'ready');
});

after(async () => {
  await client?.close();
  await server?.stop();
  collector?.close();
});

const spans = () => exports.flatMap((e) => e.body.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)));
const attr = (span: OtlpSpan, key: string) => {
  const v = span.attributes?.find((a) => a.key === key)?.value;
  return v?.stringValue ?? (v?.intValue !== undefined ? Number(v.intValue) : v?.doubleValue);
};
const nanos = (s: string) => BigInt(s);

async function waitForSpan(match: (s: OtlpSpan) => boolean, what: string): Promise<OtlpSpan> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const found = spans().find(match);
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`no span ${what}; got ${JSON.stringify(spans().map((s) => s.name))}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('OpenTelemetry spans', { timeout: 90_000 }, () => {
  it('exports tensorgate.infer with the request id, and a child per stage placed in it', async () => {
    const result = await client.callTool({
      name: 'infer',
      arguments: { model: MODEL, inputs: { features: [[5.1, 3.5, 1.4, 0.2]] } },
    });
    assert.notEqual(result.isError, true, JSON.stringify(result));
    const id = (result.structuredContent as { request_id: string }).request_id;
    const root = await waitForSpan(
      (s) => s.name === 'tensorgate.infer' && attr(s, 'tensorgate.request_id') === id,
      `for request ${id}`,
    );
    assert.equal(attr(root, 'tensorgate.model'), MODEL);
    assert.equal(attr(root, 'tensorgate.model_version'), '1');
    assert.equal(attr(root, 'tensorgate.batch_size'), 1);
    assert.equal(attr(root, 'tensorgate.variant'), 'torch-fp32');
    assert.equal(attr(root, 'tensorgate.adapter'), 'mcp');
    assert.equal(root.parentSpanId || undefined, undefined);
    assert.ok(nanos(root.endTimeUnixNano) >= nanos(root.startTimeUnixNano));
    // Within a minute of now: performance.now() offsets were mapped to wall-clock time.
    const startMs = Number(nanos(root.startTimeUnixNano) / 1_000_000n);
    assert.ok(Math.abs(Date.now() - startMs) < 60_000, `span start ${new Date(startMs).toISOString()}`);

    const children = await (async () => {
      const deadline = Date.now() + 15_000;
      for (;;) {
        const found = spans().filter((s) => s.parentSpanId === root.spanId);
        if (found.length >= 5 || Date.now() > deadline) return found;
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    assert.deepEqual(children.map((s) => s.name).sort(), [
      'tensorgate.compute',
      'tensorgate.decode',
      'tensorgate.encode',
      'tensorgate.queue',
      'tensorgate.transfer',
    ]);
    const slackNs = 1_000_000n; // stage times are rounded to the microsecond
    for (const child of children) {
      assert.equal(child.traceId, root.traceId);
      const start = nanos(child.startTimeUnixNano);
      const end = nanos(child.endTimeUnixNano);
      assert.ok(end >= start, `${child.name} has a negative duration`);
      assert.ok(start >= nanos(root.startTimeUnixNano) - slackNs, `${child.name} starts before its parent`);
      assert.ok(end <= nanos(root.endTimeUnixNano) + slackNs, `${child.name} ends after its parent`);
    }
    const byName = new Map(children.map((s) => [s.name, s]));
    const order = ['decode', 'queue', 'transfer', 'compute', 'encode'].map((n) => byName.get(`tensorgate.${n}`));
    for (let i = 1; i < order.length; i++) {
      assert.ok(
        nanos((order[i] as OtlpSpan).startTimeUnixNano) >= nanos((order[i - 1] as OtlpSpan).endTimeUnixNano) - slackNs,
        'stages follow one another',
      );
    }
    const resource = exports[0]?.body.resourceSpans[0]?.resource?.attributes ?? [];
    assert.equal(resource.find((a) => a.key === 'service.name')?.value.stringValue, 'tensorgate');
    assert.match(exports[0]?.contentType ?? '', /^application\/json/);
  });

  it('exports a failed request as tensorgate.infer with status ERROR and the error code', async () => {
    const response = await fetch(`${server.base}/v2/models/${MODEL}/infer`, {
      method: 'POST',
      body: JSON.stringify({
        id: 'bad-1',
        inputs: [{ name: 'features', shape: [1, 3], datatype: 'FP32', data: [1, 2, 3] }],
      }),
    });
    assert.equal(response.status, 400);
    const span = await waitForSpan((s) => attr(s, 'tensorgate.request_id') === 'bad-1', 'for bad-1');
    assert.equal(span.name, 'tensorgate.infer');
    assert.equal(span.status?.code, 2); // STATUS_CODE_ERROR
    assert.match(span.status?.message ?? '', /shape/);
    assert.equal(attr(span, 'tensorgate.error_code'), 'SHAPE_MISMATCH');
    assert.equal(attr(span, 'error.type'), 'SHAPE_MISMATCH');
    assert.equal(attr(span, 'tensorgate.adapter'), 'oip-rest');
  });

  it('sends the spans still queued when the server stops', async () => {
    const response = await fetch(`${server.base}/v2/models/${MODEL}/infer`, {
      method: 'POST',
      body: JSON.stringify({
        id: 'last-1',
        inputs: [{ name: 'features', shape: [1, 4], datatype: 'FP32', data: [1, 2, 3, 4] }],
      }),
    });
    assert.equal(response.status, 200);
    assert.equal(await server.stop(), 0);
    assert.ok(spans().some((s) => attr(s, 'tensorgate.request_id') === 'last-1'));
  });
});
