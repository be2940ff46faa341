import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bytes, dominantStage, duration, ms, rate, renderTop } from '../../../src/cli/top-view.js';
import type { Percentiles, Stage, WindowSummary } from '../../../src/metrics/request-window.js';
import type { ServerSnapshot, VersionSnapshot } from '../../../src/metrics/snapshot.js';

/** `tensorgate top`'s layout, from a snapshot shaped like the server's (GET /dashboard/api/snapshot). */

const MiB = 1024 * 1024;
const ESC = '\x1b';

function p(p50: number, p90: number, p99: number, mean: number): Percentiles {
  return { p50, p90, p99, mean };
}

function window(overrides: Partial<WindowSummary> = {}): WindowSummary {
  const zero = p(0, 0, 0, 0);
  const stages = Object.fromEntries(
    (['decode', 'queue', 'transfer', 'compute', 'encode', 'total'] as Stage[]).map((s) => [s, zero]),
  ) as Record<Stage, Percentiles>;
  return {
    window_s: 60,
    requests: 0,
    succeeded: 0,
    failed: 0,
    throughput_rps: 0,
    rows_per_s: 0,
    error_rate: 0,
    top_errors: [],
    latency_ms: zero,
    stages_ms: stages,
    batch_size_avg: 0,
    forms: {},
    ...overrides,
  };
}

function version(overrides: Partial<VersionSnapshot>): VersionSnapshot {
  return {
    version: '1',
    state: 'ready',
    device: 'cpu',
    instances: 1,
    busy: 0,
    queued: 0,
    pipelined: 0,
    restarts: 0,
    batches: {},
    workers: [{ pid: 4242, rss_bytes: 237 * MiB, cpu_seconds: 3.2 }],
    window: window(),
    totals: { success: 0, failure: 0, inferences: 0 },
    ...overrides,
  };
}

function snapshot(): ServerSnapshot {
  return {
    tensorgate: '0.1.0',
    time: Date.parse('2026-12-03T06:40:00Z'),
    uptime_s: 3725,
    window_s: 60,
    models: [
      {
        name: 'tabular-classifier',
        description: 'iris',
        default_version: '1',
        versions: [
          version({
            instances: 2,
            busy: 1,
            queued: 3,
            batches: { '1': 120, '4': 30 },
            window: window({
              requests: 186,
              succeeded: 180,
              failed: 6,
              throughput_rps: 3.1,
              rows_per_s: 6.2,
              error_rate: 6 / 186,
              top_errors: [
                { code: 'SHAPE_MISMATCH', count: 5 },
                { code: 'TIMEOUT', count: 1 },
              ],
              latency_ms: p(1.6, 2.9, 10.9, 2.1),
              stages_ms: {
                decode: p(0.1, 0.2, 0.4, 0.12),
                preprocess: p(0, 0, 0, 0),
                queue: p(0.2, 0.9, 6.1, 0.5),
                transfer: p(0.3, 0.4, 0.8, 0.31),
                compute: p(0.8, 1.1, 3.0, 0.9),
                postprocess: p(0, 0, 0, 0),
                encode: p(0.1, 0.1, 0.2, 0.08),
                total: p(1.6, 2.9, 10.9, 2.1),
              },
              batch_size_avg: 1.4,
            }),
            totals: { success: 1200, failure: 14, inferences: 2400 },
          }),
        ],
      },
      {
        name: 'image-classifier',
        description: 'resnet',
        default_version: '2',
        versions: [
          version({ version: '1', state: 'failed', workers: [], error: 'CUDA out of memory', instances: 0 }),
          version({ version: '2', state: 'loading', workers: [], instances: 0 }),
        ],
      },
    ],
    unattributed: { failed: 2, top_errors: [{ code: 'MODEL_NOT_FOUND', count: 2 }] },
    training: [
      {
        id: 'r-1',
        name: 'mnist-mlp',
        state: 'running',
        step: 1200,
        world_size: 2,
        started_at: '2026-12-03T06:00:00Z',
        pid: 777,
        latest: { lr: 0.0003, loss: 0.23456 },
      },
    ],
    jobs: [
      {
        id: '3f2a9c1e-0000-4000-8000-000000000000',
        model: 'digits',
        state: 'running',
        results: '/data/digits.jsonl',
        items: 12000,
        done: 640,
        failed: 2,
        errors: { BAD_IMAGE: 2 },
        items_per_second: 410,
        eta_s: 28,
        created_at: '2026-12-03T06:39:00Z',
        created_by: 'mcp:agent',
        updated_at: '2026-12-03T06:39:59Z',
      },
    ],
  };
}

describe('renderTop', () => {
  it('draws a header, one row per model version with its figures, and the training runs', () => {
    const lines = renderTop(snapshot(), { width: 200 });
    const text = lines.join('\n');
    assert.doesNotMatch(text, new RegExp(ESC), 'no escape codes without colour');
    assert.equal(lines[0], 'tensorgate 0.1.0 · up 1h02m · 2 models, 3 versions (1 ready, 1 failed, 1 loading)');
    assert.equal(lines[1], 'last 60 s: 3.10 req/s, 4.3% errors · since start: 1200 ok, 14 failed, 2400 inferences');
    assert.match(text, /no model: 2 failed \(MODEL_NOT_FOUND 2\)/);
    const heading = lines.find((l) => l.startsWith('MODEL@VERSION')) as string;
    for (const title of ['STATE', 'INST', 'QUEUE', 'REQ/S', 'P50 MS', 'P90 MS', 'P99 MS', 'ERR%', 'BATCH', 'MEM'])
      assert.ok(heading.includes(title), title);
    const row = lines.find((l) => l.startsWith('tabular-classifier@1')) as string;
    assert.match(row, /ready\s+cpu\s+1\/2\s+3\s+3\.10\s+1\.60\s+2\.90\s+10\.9\s+3\.2% SHAPE_MISMATCH\s+1\.4\s+237M/);
    assert.match(row, /compute 43%$/, 'the stage with the largest mean share');
    assert.match(text, /^image-classifier@1\s+failed/m);
    assert.match(text, /^ {2}└ CUDA out of memory$/m);
    assert.match(text, /^image-classifier@2\s+loading\s+cpu\s+0\/0\s+0\s+0\s+-\s+-\s+-\s+-/m);
    assert.match(text, /^RUN\s+STATE\s+STEP\s+RANKS\s+LATEST$/m);
    assert.match(text, /^mnist-mlp\s+running\s+1200\s+2\s+loss 0\.2346, lr 0\.0003$/m);
    assert.match(text, /^JOB\s+RUNS\s+DONE\s+FAILED\s+ITEMS\/S\s+ETA$/m);
    assert.match(text, /^3f2a9c1e\s+digits\s+640\/12000\s+2\s+410\s+28 s$/m);
    assert.ok(!text.includes('GPU'), 'no GPU line or column without GPUs');
  });

  it('keeps every line within the width, leaving out the least useful columns first', () => {
    for (const width of [200, 120, 100, 80, 60, 40]) {
      const lines = renderTop(snapshot(), { width });
      for (const line of lines) assert.ok([...line].length <= width, `${width}: ${line}`);
      const heading = lines.find((l) => l.startsWith('MODEL@')) as string;
      assert.match(heading, /STATE/, `${width}: the state is always shown`);
      if (width >= 80) {
        for (const title of ['REQ/S', 'P99 MS', 'ERR%', 'INST'])
          assert.ok(heading.includes(title), `${width}: ${title}`);
        assert.equal(heading.includes('TOP STAGE'), width >= 120, `${width}: the stage hint goes first`);
        if (width >= 120)
          assert.ok(
            lines.some((l) => l.startsWith('tabular-classifier@1 ')),
            `${width}: whole names`,
          );
      }
    }
  });

  it('cuts the view to the terminal height and keeps the footer', () => {
    const lines = renderTop(snapshot(), { width: 120, height: 8, footer: 'http://127.0.0.1:8765 · q quits' });
    assert.equal(lines.length, 8);
    assert.match(lines[5] as string, /^… \d+ more lines/);
    assert.equal(lines[7], 'http://127.0.0.1:8765 · q quits');
  });

  it('colours states and errors only when asked', () => {
    const lines = renderTop(snapshot(), { width: 200, color: true });
    const text = lines.join('\n');
    assert.ok(text.includes(`${ESC}[32mready`), 'ready in green');
    assert.ok(text.includes(`${ESC}[31mfailed`), 'failed in red');
    assert.ok(text.includes(`${ESC}[33mloading`), 'loading in yellow');
    const plain = (lines.find((l) => l.includes('tabular-classifier@1')) as string).replace(
      new RegExp(`${ESC}\\[[\\d;]*m`, 'g'),
      '',
    );
    assert.ok(plain.length <= 200);
  });

  it('shows the GPUs and the memory workers hold on them when there are GPUs', () => {
    const s = snapshot();
    s.gpus = [
      {
        index: 0,
        name: 'NVIDIA H200',
        utilization: 0.34,
        memory_used_bytes: 12 * 1024 * MiB,
        memory_total_bytes: 141 * 1024 * MiB,
      },
    ];
    const tabular = s.models[0]?.versions[0] as VersionSnapshot;
    tabular.device = 'cuda:0';
    // MEM is the proportional set size where the server read it (the first row's resident memory above).
    tabular.workers = [
      { pid: 1, rss_bytes: 900 * MiB, pss_bytes: 310 * MiB, cpu_seconds: 1, gpu_memory_bytes: 1536 * MiB },
    ];
    const lines = renderTop(s, { width: 220 });
    assert.ok(lines.includes('GPU 0 NVIDIA H200: 34% busy, 12.0/141.0 GiB'));
    assert.match(lines.find((l) => l.startsWith('MODEL@')) as string, /GPU MEM/);
    assert.match(lines.find((l) => l.startsWith('tabular-classifier@1')) as string, /cuda:0.*310M\s+1\.5G/);
  });

  it('says so when no model is registered', () => {
    const s = snapshot();
    s.models = [];
    s.training = [];
    const lines = renderTop(s, { width: 100 });
    assert.ok(lines.includes('no models registered'));
    assert.match(lines[0] as string, /0 models, 0 versions/);
  });
});

describe('top formats', () => {
  it('writes durations, rates, milliseconds and sizes compactly', () => {
    assert.deepEqual(
      [duration(42), duration(427), duration(3725), duration(273600)],
      ['42s', '7m07s', '1h02m', '3d04h'],
    );
    assert.deepEqual(
      [rate(0), rate(0.05), rate(31.25), rate(812.4), rate(15_300)],
      ['0', '0.05', '31.3', '812', '15.3k'],
    );
    assert.deepEqual([ms(0.84), ms(12.34), ms(123.4), ms(12_345)], ['0.84', '12.3', '123', '12.3s']);
    assert.deepEqual([bytes(512 * 1024), bytes(237 * MiB), bytes(1.5 * 1024 * MiB)], ['512K', '237M', '1.5G']);
  });

  it('names no dominant stage without successful requests', () => {
    assert.equal(dominantStage(version({})), '-');
  });
});
