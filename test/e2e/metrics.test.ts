import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { httpServerForFile } from '../helpers/mcp.js';
import { ROOT } from '../helpers/models.js';

/**
 * /metrics of the real server after real traffic (MCP and OIP v2), parsed by Prometheus's own
 * Python parser (prometheus_client, in .tensorgate/pyclients).
 */

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
type Families = Record<string, { type: string; samples: Sample[] }>;

const CLIENT_PYTHON = join(ROOT, '.tensorgate', 'pyclients', 'bin', 'python');
const http = httpServerForFile();
const NON_FINITE: Record<string, number> = { NaN: Number.NaN, '+Inf': Infinity, '-Inf': -Infinity };

async function scrape(): Promise<Families> {
  const response = await fetch(`${http.base}/metrics`);
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  const text = await response.text();
  const parsed = execFileSync(CLIENT_PYTHON, [join(ROOT, 'test/fixtures/parse_prometheus.py')], {
    input: text,
    encoding: 'utf8',
  });
  // The parser prints NaN and the infinities as Prometheus's own spellings (not JSON numbers).
  return JSON.parse(parsed, (key, v) => (key === 'value' && typeof v === 'string' ? NON_FINITE[v] : v)) as Families;
}

function value(families: Families, family: string, labels: Record<string, string>, sample = family): number {
  const found = families[family]?.samples.find(
    (s) => s.name === sample && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  return found?.value ?? 0;
}

describe('Prometheus /metrics', () => {
  it('counts real traffic: successes, failures by code, rows, passes, stage histograms', async () => {
    const tabular = { model: 'tabular-classifier', version: '1' };
    const before = await scrape();
    for (let i = 0; i < 3; i++) {
      const ok = await http.server.client.callTool({
        name: 'infer',
        arguments: {
          model: 'tabular-classifier',
          inputs: {
            features: [
              [5.1, 3.5, 1.4, 0.2],
              [6.7, 3.0, 5.2, 2.3],
            ],
          },
        },
      });
      assert.ok(!ok.isError);
    }
    const bad = await http.server.client.callTool({
      name: 'infer',
      arguments: { model: 'tabular-classifier', inputs: { features: [[1, 2, 3]] } },
    });
    assert.ok(bad.isError);
    const missing = await fetch(`${http.base}/v2/models/no-such-model/infer`, { method: 'POST', body: '{}' });
    assert.equal(missing.status, 404);
    const malformed = await fetch(`${http.base}/v2/models/tabular-classifier/infer`, { method: 'POST', body: '{' });
    assert.equal(malformed.status, 400);

    const after = await scrape();
    const delta = (family: string, labels: Record<string, string>, sample = family) =>
      value(after, family, labels, sample) - value(before, family, labels, sample);
    assert.equal(after.nv_inference_request_success?.type, 'counter');
    assert.equal(delta('nv_inference_request_success', tabular, 'nv_inference_request_success_total'), 3);
    assert.equal(delta('nv_inference_count', tabular, 'nv_inference_count_total'), 6);
    assert.equal(
      delta(
        'nv_inference_request_failure',
        { ...tabular, reason: 'SHAPE_MISMATCH' },
        'nv_inference_request_failure_total',
      ),
      1,
    );
    assert.ok(delta('nv_inference_exec_count', tabular, 'nv_inference_exec_count_total') >= 1);
    for (const code of ['SHAPE_MISMATCH', 'MODEL_NOT_FOUND', 'INVALID_REQUEST'])
      assert.equal(delta('tensorgate_errors', { code }, 'tensorgate_errors_total'), 1, code);
    assert.ok(
      delta('nv_inference_compute_infer_duration_us', tabular, 'nv_inference_compute_infer_duration_us_total') > 0,
    );

    assert.equal(after.tensorgate_request_stage_seconds?.type, 'histogram');
    for (const stage of ['decode', 'queue', 'transfer', 'compute', 'encode', 'total'])
      assert.equal(
        delta('tensorgate_request_stage_seconds', { ...tabular, stage }, 'tensorgate_request_stage_seconds_count'),
        3,
        stage,
      );
    const total = (le: string) =>
      value(
        after,
        'tensorgate_request_stage_seconds',
        { ...tabular, stage: 'total', le },
        'tensorgate_request_stage_seconds_bucket',
      );
    assert.ok(total('+Inf') >= 3);
    assert.ok(total('0.000025') <= total('1.05'), 'buckets are cumulative');
    assert.equal(delta('tensorgate_batch_size', tabular, 'tensorgate_batch_size_count'), 3);
  });

  it('shows each model version state, queue depth and worker memory', async () => {
    const families = await scrape();
    assert.equal(
      value(families, 'tensorgate_model_state', { model: 'tabular-classifier', version: '1', state: 'ready' }),
      1,
    );
    assert.equal(
      value(families, 'tensorgate_model_state', { model: 'tabular-classifier', version: '1', state: 'failed' }),
      0,
    );
    assert.equal(value(families, 'tensorgate_queue_depth', { model: 'tabular-classifier', version: '1' }), 0);
    const rss = families.tensorgate_worker_resident_memory_bytes?.samples.find(
      (s) => s.labels.model === 'tabular-classifier',
    );
    assert.ok(rss && rss.value > 10 * 2 ** 20, 'a worker holds at least 10 MiB');
    // Forked from a fork server (the default), a worker shares torch's pages with it: its
    // proportional share is below its resident memory, and the fork server holds the rest.
    const pss = families.tensorgate_worker_proportional_memory_bytes?.samples.find(
      (s) => s.labels.model === 'tabular-classifier' && s.labels.pid === rss.labels.pid,
    );
    assert.ok(pss && pss.value > 0 && pss.value < rss.value, `PSS ${pss?.value} against RSS ${rss.value}`);
    const [server, ...others] = families.tensorgate_fork_server_proportional_memory_bytes?.samples ?? [];
    assert.ok(server && server.value > 50 * 2 ** 20 && others.length === 0, 'one fork server, holding torch');
    assert.ok((families.tensorgate_worker_cpu_seconds?.samples.length ?? 0) > 0);
    // The demo tabular MLP, 4-16-3 in float32, and any normalisation buffers it keeps.
    const loaded = value(families, 'tensorgate_model_loaded_bytes', { model: 'tabular-classifier', version: '1' });
    assert.ok(loaded >= (4 * 16 + 16 + 16 * 3 + 3) * 4 && loaded < 10_000, String(loaded));
    // The gateway process's own figures: prom-client's default metrics.
    assert.ok(value(families, 'process_cpu_seconds', {}, 'process_cpu_seconds_total') > 0);
    assert.ok(value(families, 'process_resident_memory_bytes', {}) > 20 * 2 ** 20, 'the gateway holds 20 MiB and more');
    assert.equal(families.nodejs_gc_duration_seconds?.type, 'histogram');
    assert.ok(
      value(families, 'nodejs_gc_duration_seconds', { kind: 'minor' }, 'nodejs_gc_duration_seconds_count') >= 1,
      'a served gateway has scavenged at least once',
    );
    assert.ok(value(families, 'nodejs_eventloop_lag_p99_seconds', {}) >= 0);
    if (!existsSync('/dev/nvidiactl'))
      assert.deepEqual(
        Object.keys(families).filter((name) => name.includes('gpu')),
        [],
        'no GPU: no GPU series at all',
      );
  });
});
