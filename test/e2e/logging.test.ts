import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { type LogRecord, type Served, serveOne } from '../helpers/serve.js';

/**
 * The structured log of the real server: JSON records on stderr, one per request with the id the
 * client got back, the model and every stage time, over MCP and OIP v2 REST; failures with their
 * code; lifecycle and worker output as records too.
 */

const MODEL = 'tabular-classifier';
const STAGES = ['decode_ms', 'queue_ms', 'transfer_ms', 'compute_ms', 'encode_ms', 'total_ms'] as const;
let server: Served;
let client: Client;

before(async () => {
  server = await serveOne(MODEL);
  client = new Client({ name: 'logging-test', version: '0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  await server.waitForRecord((r) => r.msg.startsWith('ready: '), 'ready');
});

after(async () => {
  await client?.close();
  await server?.stop();
});

function assertTimings(record: LogRecord): void {
  for (const stage of STAGES) {
    assert.equal(typeof record[stage], 'number', `${stage} in ${JSON.stringify(record)}`);
    assert.ok((record[stage] as number) >= 0, stage);
  }
  assert.ok((record.total_ms as number) >= (record.compute_ms as number));
}

describe('request log', { timeout: 90_000 }, () => {
  it('logs an MCP infer with the request id the client got, the model and every stage time', async () => {
    const result = await client.callTool({
      name: 'infer',
      arguments: { model: MODEL, inputs: { features: [[5.1, 3.5, 1.4, 0.2]] } },
    });
    assert.notEqual(result.isError, true, JSON.stringify(result));
    const id = (result.structuredContent as { request_id: string }).request_id;
    const record = await server.waitForRecord((r) => r.request_id === id, `for request ${id}`);
    assert.equal(record.level, 'info');
    assert.equal(record.msg, 'inference');
    assert.equal(record.model, MODEL);
    assert.equal(record.version, '1');
    assert.equal(record.adapter, 'mcp');
    assert.equal(record.batch_size, 1);
    assert.equal(record.rows, 1);
    assertTimings(record);
  });

  it('logs an OIP v2 REST infer under the id the client sent', async () => {
    const response = await fetch(`${server.base}/v2/models/${MODEL}/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        id: 'oip-log-1',
        inputs: [{ name: 'features', shape: [2, 4], datatype: 'FP32', data: [5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3] }],
      }),
    });
    assert.equal(response.status, 200, await response.clone().text());
    assert.equal(((await response.json()) as { id: string }).id, 'oip-log-1');
    const record = await server.waitForRecord((r) => r.request_id === 'oip-log-1', 'for oip-log-1');
    assert.equal(record.msg, 'inference');
    assert.equal(record.model, MODEL);
    assert.equal(record.adapter, 'oip-rest');
    assert.equal(record.rows, 2);
    assertTimings(record);
  });

  it('logs a failed request at warn with its code and message', async () => {
    const result = await client.callTool({
      name: 'infer',
      arguments: { model: MODEL, inputs: { features: [[1, 2, 3]] } },
    });
    assert.equal(result.isError, true);
    const record = await server.waitForRecord(
      (r) => r.msg === 'inference failed' && r.code === 'SHAPE_MISMATCH',
      'SHAPE_MISMATCH',
    );
    assert.equal(record.level, 'warn');
    assert.equal(record.model, MODEL);
    assert.equal(record.adapter, 'mcp');
    assert.equal(typeof record.request_id, 'string');
    assert.match(record.error as string, /shape/);

    const missing = await fetch(`${server.base}/v2/models/no-such-model/infer`, { method: 'POST', body: '{}' });
    assert.equal(missing.status, 404);
    const notFound = await server.waitForRecord((r) => r.code === 'MODEL_NOT_FOUND', 'MODEL_NOT_FOUND');
    assert.equal(notFound.adapter, 'oip-rest');
  });

  it('writes nothing but JSON records on stderr: lifecycle, worker output, requests, shutdown', async () => {
    const records = server.records();
    const loading = records.find((r) => r.msg.startsWith(`loading ${MODEL}@1`));
    assert.deepEqual([loading?.model, loading?.version], [MODEL, '1']);
    const worker = records.find((r) => r.worker === `${MODEL}@1#0`);
    assert.ok(worker, 'a record forwarded from the Python worker');
    assert.equal(typeof worker.pid, 'number');
    assert.equal(worker.model, MODEL);
    for (const r of records) {
      assert.match(r.level, /^(trace|debug|info|warn|error|fatal)$/);
      assert.equal(typeof r.time, 'number');
    }
    assert.equal(await server.stop(), 0);
    // Written out before the process exited.
    assert.ok(server.records().some((r) => r.msg.startsWith('SIGTERM: stopping')));
  });
});
