import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type Connected, connect } from '../helpers/mcp.js';

/**
 * get_metrics and explain_latency on the real server (real workers, the official MCP client over
 * Streamable HTTP), with traffic shaped so that one stage must dominate: concurrent calls to a
 * one-instance model that sleeps (queueing), and large inputs sent as JSON arrays to a model that
 * only sums rows (decoding).
 */

interface Row {
  model: string;
  version: string;
  state: string;
  requests: number;
  p50_ms: number;
  p99_ms: number;
  error_rate: number;
  top_errors: { code: string; count: number }[];
  avg_batch: number;
  memory_bytes: number;
  loaded_bytes?: number;
  stages_ms?: Record<string, { p50: number }>;
  workers?: { pid: number; rss_bytes: number; pss_bytes?: number }[];
}

interface Explained {
  model: string;
  version: string;
  request_id?: string;
  requests: number;
  dominant_stage: string;
  breakdown: { stage: string; ms: number; share: number }[];
  diagnosis: string[];
  recent?: { request_id: string; ok: boolean; total_ms: number }[];
}

let server: Connected;

before(async () => {
  // The sleepy fixture reads its pause on every call; its worker inherits the server's environment.
  process.env.TENSORGATE_SLEEPY_SECONDS = '0.08';
  // The young-generation size docs/metrics.md recommends for JSON-array traffic: with Node's
  // default, scavenging 400k parsed numbers takes 15-45 ms and lands in whichever stage is open.
  process.env.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ''} --max-semi-space-size=64`.trim();
  server = await connect('http');
});

after(async () => {
  await server.close();
});

async function call<T>(name: string, args: Record<string, unknown>): Promise<{ structured: T; text: string }> {
  const result = await server.client.callTool({ name, arguments: args });
  const text = (result.content as { type: string; text: string }[])[0]?.text ?? '';
  assert.ok(!result.isError, `${name} failed: ${text}`);
  return { structured: result.structuredContent as T, text };
}

async function callError(name: string, args: Record<string, unknown>): Promise<string> {
  const result = await server.client.callTool({ name, arguments: args });
  assert.equal(result.isError, true);
  return (result.content as { text: string }[])[0]?.text ?? '';
}

function matrix(rows: number, cols: number, value: (i: number, j: number) => number): number[][] {
  return Array.from({ length: rows }, (_, i) => Array.from({ length: cols }, (_, j) => value(i, j)));
}

describe('get_metrics', () => {
  it('reflects real traffic: counts, percentiles, error codes, memory', async () => {
    const features = [
      [5.1, 3.5, 1.4, 0.2],
      [6.7, 3.0, 5.2, 2.3],
    ];
    for (let i = 0; i < 5; i++) await call('infer', { model: 'tabular-classifier', inputs: { features } });
    await callError('infer', { model: 'tabular-classifier', inputs: { features: [[1, 2, 3]] } });
    await callError('infer', { model: 'no-such-model', inputs: {} });

    const { structured, text } = await call<{ window_s: number; models: Row[]; unattributed_errors?: unknown[] }>(
      'get_metrics',
      { model: 'tabular-classifier', detail: 'full' },
    );
    // One row per version: the .pt2 program (1, the default, which served) and the eager code (2).
    assert.deepEqual(
      structured.models.map((m) => `${m.model}@${m.version}`),
      ['tabular-classifier@1', 'tabular-classifier@2'],
    );
    assert.equal(structured.models[1]?.requests, 0);
    const row = structured.models[0] as Row;
    assert.equal(row.model, 'tabular-classifier');
    assert.equal(row.state, 'ready');
    assert.equal(row.requests, 6);
    assert.ok(row.p50_ms > 0 && row.p99_ms >= row.p50_ms, JSON.stringify(row));
    assert.ok(Math.abs(row.error_rate - 1 / 6) < 0.01, String(row.error_rate));
    assert.deepEqual(row.top_errors, [{ code: 'SHAPE_MISMATCH', count: 1 }]);
    assert.equal(row.avg_batch, 2);
    // The workers' proportional memory: a forked worker's share of the torch pages it shares with
    // its fork server and siblings, not those pages whole as its resident memory counts them.
    const workers = row.workers ?? [];
    assert.ok(workers.length > 0 && workers.every((w) => w.pss_bytes !== undefined), JSON.stringify(workers));
    assert.ok(workers.every((w) => (w.pss_bytes as number) > 0 && (w.pss_bytes as number) <= w.rss_bytes));
    assert.equal(
      row.memory_bytes,
      workers.reduce((sum, w) => sum + (w.pss_bytes as number), 0),
    );
    assert.ok(row.memory_bytes > 10 * 2 ** 20, 'worker memory is reported');
    assert.ok((row.loaded_bytes ?? 0) > 0, 'parameter bytes are reported');
    assert.ok((row.stages_ms?.compute?.p50 ?? 0) > 0);
    assert.match(text, /tabular-classifier@1 ready: 6 req/);
    assert.match(text, /SHAPE_MISMATCH 1/);

    const all = await call<{ models: Row[]; unattributed_errors?: { code: string; count: number }[] }>(
      'get_metrics',
      {},
    );
    assert.ok(all.structured.models.some((m) => m.model === 'sleepy'));
    assert.equal(all.structured.models[0]?.stages_ms, undefined, 'concise by default');
    assert.deepEqual(all.structured.unattributed_errors, [{ code: 'MODEL_NOT_FOUND', count: 1 }]);

    assert.match(await callError('get_metrics', { model: 'nope' }), /^MODEL_NOT_FOUND/);
  });
});

describe('explain_latency', () => {
  it('names queueing when concurrent calls wait for a one-instance model', async () => {
    const x = [[1, 2, 3, 4]];
    await Promise.all(Array.from({ length: 8 }, () => call('infer', { model: 'sleepy', inputs: { x } })));
    const { structured, text } = await call<Explained>('explain_latency', { model: 'sleepy' });
    assert.equal(structured.requests, 8);
    assert.equal(structured.dominant_stage, 'queue', text);
    assert.equal(structured.breakdown[0]?.stage, 'queue');
    assert.match(structured.diagnosis[0] as string, /^queue dominates .*resources\.instances/);
    assert.equal(structured.recent?.length, 5);
  });

  it('names decoding when large inputs come as JSON arrays', async () => {
    // 400k numbers in, 40 out: the forward pass and the output are tiny next to the input.
    const x = matrix(40, 10_000, (i, j) => (i * 7 + j) % 13);
    type Timed = { request_id: string; timings: { decode_ms: number; total_ms: number } };
    const runs: Timed[] = [];
    for (let i = 0; i < 8; i++) {
      runs.push((await call<Timed>('infer', { model: 'row_sum', inputs: { x } })).structured);
    }
    // A shared CI host can still stall any one request (a GC pause, a preempted worker); the by-id check takes the request
    // whose own timings show decode's largest share, so it tests the explanation, not the host.
    const share = (r: Timed) => r.timings.decode_ms / r.timings.total_ms;
    const requestId = runs.reduce((a, b) => (share(b) > share(a) ? b : a)).request_id;
    const { structured, text } = await call<Explained>('explain_latency', { model: 'row_sum' });
    assert.equal(structured.dominant_stage, 'decode', text);
    assert.match(structured.diagnosis[0] as string, /^decode dominates .*JSON arrays \(8 of 8 requests\)/);

    // One request by id: the same finding, and the request is named.
    const one = await call<Explained>('explain_latency', { request_id: requestId });
    assert.equal(one.structured.request_id, requestId);
    assert.equal(one.structured.model, 'row_sum');
    assert.equal(one.structured.dominant_stage, 'decode', one.text);
    assert.match(one.text, new RegExp(`request ${requestId}`));
  });

  it('answers bad questions with stable codes', async () => {
    assert.match(await callError('explain_latency', { request_id: 'not-a-request' }), /^REQUEST_NOT_FOUND/);
    assert.match(await callError('explain_latency', {}), /^INVALID_REQUEST/);
    assert.match(await callError('explain_latency', { model: 'nope' }), /^MODEL_NOT_FOUND/);
    assert.match(await callError('explain_latency', { model: 'row_sum', version: '9' }), /^VERSION_NOT_FOUND/);
    // The server keeps serving.
    await call('get_metrics', { model: 'row_sum' });
  });
});
