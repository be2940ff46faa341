import assert from 'node:assert/strict';
import fs, { mkdtempSync, openSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { tgError } from '../../../src/errors.js';
import { createLogging, type LoggingOptions } from '../../../src/observability/logging.js';
import { prettyLine } from '../../../src/observability/pretty.js';
import type { FinishedRequest } from '../../../src/observability/request-observer.js';
import { tracesEndpoint } from '../../../src/observability/tracing.js';

/** The log formats, levels and the request record, written by real pino into a real file. */

const finished: FinishedRequest = {
  request_id: 'r-1',
  model: 'tabular-classifier',
  version: '1',
  adapter: 'mcp',
  variant: 'onnx-fp32',
  batch_size: 2,
  rows: 1,
  timings: { decode_ms: 0.01, queue_ms: 0.02, transfer_ms: 0.3, compute_ms: 0.05, encode_ms: 0.01, total_ms: 0.4 },
  startedAt: 1,
  decodeStartedAt: 1.1,
  encodeStartedAt: 1.4,
  endedAt: 1.41,
};

async function written(options: LoggingOptions, write: (logs: ReturnType<typeof createLogging>) => void) {
  const file = join(mkdtempSync(join(tmpdir(), 'tensorgate-logs-')), 'log');
  const logs = createLogging({ ...options, dest: file });
  write(logs);
  await logs.close();
  return readFileSync(file, 'utf8').split('\n').filter(Boolean);
}

describe('pretty format', () => {
  it('puts time, level and message first, then the fields as key=value', () => {
    const line = prettyLine({
      level: 'warn',
      time: Date.UTC(2026, 0, 2, 14, 3, 7, 412),
      msg: 'inference failed',
      request_id: 'r-1',
      code: 'SHAPE_MISMATCH',
      error: 'input "features" has shape [1, 3]',
      total_ms: 0.416,
      absent: undefined,
      flags: { batched: true },
    });
    assert.equal(
      line,
      '14:03:07.412 WARN  inference failed request_id=r-1 code=SHAPE_MISMATCH ' +
        'error="input \\"features\\" has shape [1, 3]" total_ms=0.416 flags={"batched":true}',
    );
  });

  it('quotes empty strings and values with = or spaces, and shows unknown levels upper-cased', () => {
    assert.equal(
      prettyLine({ level: 'notice', time: 0, msg: 'm', a: '', b: 'x=y', c: 'two words', d: null, e: false }),
      '00:00:00.000 NOTICE m a="" b="x=y" c="two words" d=null e=false',
    );
  });

  it('is what --log-format pretty writes, for lifecycle and request records alike', async () => {
    const lines = await written({ format: 'pretty' }, (logs) => {
      logs.log('loading tabular-classifier@1', { model: 'tabular-classifier', version: '1' });
      logs.requests.finished(finished);
    });
    assert.equal(lines.length, 2);
    assert.match(
      lines[0] as string,
      /^\d\d:\d\d:\d\d\.\d{3} INFO {2}loading tabular-classifier@1 model=tabular-classifier version=1$/,
    );
    assert.match(
      lines[1] as string,
      / INFO {2}inference request_id=r-1 model=tabular-classifier version=1 adapter=mcp variant=onnx-fp32 batch_size=2 rows=1 decode_ms=0.01 queue_ms=0.02 transfer_ms=0.3 compute_ms=0.05 encode_ms=0.01 total_ms=0.4$/,
    );
  });
});

describe('JSON format', () => {
  it('writes one JSON record per line with the level as a word and the fields flat', async () => {
    const lines = await written({}, (logs) => {
      logs.log('worker crashed', { level: 'warn', model: 'm', pid: 42 });
      logs.requests.finished(finished);
      logs.requests.failed({
        request_id: undefined,
        model: 'm',
        version: undefined,
        adapter: 'oip-rest',
        error: tgError('MODEL_NOT_FOUND', 'no model "m"'),
        total_ms: undefined,
        endedAt: 2,
      });
    });
    const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    for (const r of records) assert.equal(typeof r.time, 'number');
    assert.deepEqual(
      records.map(({ time: _, ...rest }) => rest),
      [
        { level: 'warn', msg: 'worker crashed', model: 'm', pid: 42 },
        {
          level: 'info',
          msg: 'inference',
          request_id: 'r-1',
          model: 'tabular-classifier',
          version: '1',
          adapter: 'mcp',
          variant: 'onnx-fp32',
          batch_size: 2,
          rows: 1,
          decode_ms: 0.01,
          queue_ms: 0.02,
          transfer_ms: 0.3,
          compute_ms: 0.05,
          encode_ms: 0.01,
          total_ms: 0.4,
        },
        {
          level: 'warn',
          msg: 'inference failed',
          model: 'm',
          adapter: 'oip-rest',
          code: 'MODEL_NOT_FOUND',
          error: 'no model "m"',
        },
      ],
    );
  });

  it('leaves out what is below the level: warn drops request records, silent drops all', async () => {
    const atWarn = await written({ level: 'warn' }, (logs) => {
      logs.log('debug detail', { level: 'debug' });
      logs.log('started');
      logs.requests.finished(finished);
      logs.log('slow', { level: 'warn' });
    });
    assert.deepEqual(
      atWarn.map((l) => (JSON.parse(l) as { msg: string }).msg),
      ['slow'],
    );
    const silent = await written({ level: 'silent' }, (logs) => {
      logs.log('failed', { level: 'error' });
    });
    assert.deepEqual(silent, []);
  });

  it('writes out everything still buffered on close()', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'tensorgate-logs-')), 'log');
    const logs = createLogging({ dest: openSync(file, 'w'), sync: false });
    for (let i = 0; i < 1000; i++) logs.log(`record ${i}`, { i });
    await logs.close();
    const records = readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { i: number });
    assert.deepEqual(
      records.map((r) => r.i),
      Array.from({ length: 1000 }, (_, i) => i),
    );
  });
});

describe('buffered log writes', () => {
  it('writes a lone record within 100 ms, then makes no more writes while idle', async (t) => {
    const file = join(mkdtempSync(join(tmpdir(), 'tensorgate-logs-')), 'log');
    const writes: number[] = [];
    const write = fs.write;
    // SonicBoom writes through fs.write, looked up at each call.
    t.mock.method(fs, 'write', (...args: Parameters<typeof fs.write>) => {
      writes.push(performance.now());
      return (write as (...a: unknown[]) => void)(...args);
    });
    const logs = createLogging({ dest: openSync(file, 'w'), sync: false });
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    try {
      await sleep(300);
      assert.equal(writes.length, 0, 'nothing written before anything is logged');
      logs.log('alone');
      await sleep(300);
      assert.deepEqual(
        readFileSync(file, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => (JSON.parse(l) as { msg: string }).msg),
        ['alone'],
      );
      const settled = writes.length;
      assert.ok(settled >= 1 && settled <= 2, `the record, then at most one empty flush (${settled} writes)`);
      await sleep(500);
      assert.equal(writes.length, settled, 'no writes while idle');
    } finally {
      await logs.close();
    }
  });
});

describe('tracesEndpoint', () => {
  it('is off unless a flag or an OTEL variable names a collector', () => {
    assert.equal(tracesEndpoint(undefined, {}), undefined);
    assert.deepEqual(tracesEndpoint('http://127.0.0.1:4318', {}), {
      url: 'http://127.0.0.1:4318/v1/traces',
      shown: 'http://127.0.0.1:4318/v1/traces',
    });
    assert.equal(tracesEndpoint('http://c:4318/v1/traces', {})?.url, 'http://c:4318/v1/traces');
    assert.deepEqual(tracesEndpoint(undefined, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/' }), {
      url: undefined,
      shown: 'http://c:4318/v1/traces',
    });
    assert.deepEqual(tracesEndpoint(undefined, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:9999/t' }), {
      url: undefined,
      shown: 'http://c:9999/t',
    });
    assert.equal(
      tracesEndpoint(undefined, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }),
      undefined,
    );
    assert.throws(() => tracesEndpoint('not a url', {}), /not a URL/);
  });
});
