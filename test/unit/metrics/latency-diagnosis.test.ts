import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  breakdown,
  diagnoseRequest,
  diagnoseWindow,
  type ModelContext,
} from '../../../src/metrics/latency-diagnosis.js';
import { RequestWindow, type StageTimes } from '../../../src/metrics/request-window.js';
import type { InputForm } from '../../../src/requests/decode-inputs.js';

const ctx: ModelContext = { model: 'm', device: 'cpu', instances: 1, precisions: ['fp32', 'bf16'] };

function t(parts: Partial<StageTimes>): StageTimes {
  const base = {
    decode_ms: 0,
    preprocess_ms: 0,
    queue_ms: 0,
    transfer_ms: 0,
    compute_ms: 0,
    postprocess_ms: 0,
    encode_ms: 0,
    ...parts,
  };
  const sum =
    base.decode_ms +
    base.preprocess_ms +
    base.queue_ms +
    base.transfer_ms +
    base.compute_ms +
    base.postprocess_ms +
    base.encode_ms;
  return { ...base, total_ms: parts.total_ms ?? sum };
}

function window(n: number, timings: (i: number) => StageTimes, form: InputForm = 'b64', batch = 1) {
  const w = new RequestWindow(4096);
  for (let i = 0; i < n; i++) w.recordSuccess('m', '1', `r${i}`, timings(i), batch, 1, form);
  return w.summary('m', '1', 60_000);
}

describe('breakdown', () => {
  it('gives each stage its share, the unmeasured rest as other, largest first', () => {
    const shares = breakdown(t({ decode_ms: 1, queue_ms: 6, compute_ms: 2, total_ms: 10 }));
    assert.deepEqual(
      shares.map((s) => [s.stage, s.share]),
      [
        ['queue', 0.6],
        ['compute', 0.2],
        ['decode', 0.1],
        ['other', 0.1],
        ['transfer', 0],
        ['encode', 0],
      ],
    );
  });
});

describe('diagnoseWindow', () => {
  it('queueing without batching: raise instances or turn batching on', () => {
    const d = diagnoseWindow(
      window(20, () => t({ queue_ms: 30, compute_ms: 10 })),
      ctx,
    );
    assert.equal(d.dominant, 'queue');
    assert.match(d.findings[0] as string, /^queue dominates \(75% .*resources\.instances.*dynamic batching/);
  });

  it('queueing that is only the batching delay: lower max_queue_delay_us', () => {
    const batching = { max_batch_size: 32, max_queue_delay_us: 5000 };
    const d = diagnoseWindow(
      window(20, () => t({ queue_ms: 5, compute_ms: 1 })),
      { ...ctx, batching },
    );
    assert.match(d.findings[0] as string, /batching delay .*max_queue_delay_us/);
  });

  it('decoding of JSON arrays: send b64, a path or a handle', () => {
    const d = diagnoseWindow(
      window(5, () => t({ decode_ms: 8, compute_ms: 1 }), 'array'),
      ctx,
    );
    assert.equal(d.dominant, 'decode');
    assert.match(d.findings[0] as string, /JSON arrays \(5 of 5 requests\).*b64/);
  });

  it('decoding of large binary inputs: use handles or shared memory', () => {
    const d = diagnoseWindow(
      window(5, () => t({ decode_ms: 8, compute_ms: 1 }), 'b64'),
      ctx,
    );
    assert.match(d.findings[0] as string, /tensor:\/\/ handle.*shared memory/);
  });

  it('the worker round trip of a small model: batching, and spinning for calls back to back', () => {
    const d = diagnoseWindow(
      window(5, () => t({ transfer_ms: 0.3, compute_ms: 0.1 })),
      ctx,
    );
    assert.equal(d.dominant, 'transfer');
    assert.match(
      d.findings[0] as string,
      /^transfer dominates \(75% .*Batching .*resources\.spin_us keeps the worker and the gateway awake/,
    );
  });

  it('decoding images in the worker (a model with processing): smaller images, more instances', () => {
    const d = diagnoseWindow(
      window(5, () => t({ decode_ms: 0.1, preprocess_ms: 30, compute_ms: 4, postprocess_ms: 0.02 }), 'path'),
      ctx,
    );
    assert.equal(d.dominant, 'preprocess');
    assert.match(
      d.findings[0] as string,
      /^preprocess dominates \(88% .*decoding and resizing the images.*resources\.instances/,
    );
    assert.deepEqual(
      d.breakdown.slice(0, 2).map((s) => s.stage),
      ['preprocess', 'compute'],
    );
  });

  it('compute: names lower precisions the model offers and a GPU', () => {
    const d = diagnoseWindow(
      window(5, () => t({ compute_ms: 40, transfer_ms: 1 })),
      ctx,
    );
    assert.equal(d.dominant, 'compute');
    assert.match(d.findings[0] as string, /parameters\.precision: bf16.*GPU/);
  });

  it('compute on a GPU that is nearly always busy: the device is the limit, not the serving path', () => {
    const gpu: ModelContext = { ...ctx, device: 'cuda:0', gpu_utilization: 0.93 };
    const d = diagnoseWindow(
      window(5, () => t({ compute_ms: 4, transfer_ms: 0.3 })),
      gpu,
    );
    assert.equal(d.dominant, 'compute');
    assert.match(d.findings[0] as string, /busy 93% of the time, so the device, not the serving path, is the limit/);
    assert.match(d.findings[0] as string, /bf16.*compile or aoti.*another GPU/);
  });

  it('compute on a GPU that mostly waits: fill it with batches and instances', () => {
    const batched: ModelContext = {
      ...ctx,
      device: 'cuda:0',
      gpu_utilization: 0.2,
      batching: { max_batch_size: 32, max_queue_delay_us: 1000 },
    };
    const d = diagnoseWindow(
      window(5, () => t({ compute_ms: 4, transfer_ms: 0.3 }), 'b64', 3),
      batched,
    );
    assert.match(d.findings[0] as string, /busy only 20% of the time: it waits/);
    assert.match(d.findings[0] as string, /Batches average 3 of at most 32 rows/);
    const unbatched = diagnoseWindow(
      window(5, () => t({ compute_ms: 4 })),
      { ...batched, batching: undefined },
    );
    assert.match(unbatched.findings[0] as string, /Dynamic batching \("batching"/);
    // Utilisation in between, or unknown: the plain compute advice.
    const between = diagnoseWindow(
      window(5, () => t({ compute_ms: 4 })),
      { ...batched, gpu_utilization: 0.7 },
    );
    assert.match(between.findings[0] as string, /the model's forward pass on cuda:0 is the cost/);
  });

  it('no dominant stage below 40%', () => {
    const d = diagnoseWindow(
      window(5, () => t({ decode_ms: 3, queue_ms: 3, compute_ms: 3, encode_ms: 1 })),
      ctx,
    );
    assert.equal(d.dominant, 'none');
    assert.match(d.findings[0] as string, /^No single stage dominates/);
  });

  it('names the stage behind a long tail, and failures', () => {
    const summary = window(100, (i) => t({ compute_ms: 2, queue_ms: i >= 95 ? 50 : 0.1 }));
    const d = diagnoseWindow(summary, ctx);
    assert.ok(
      d.findings.some((f) => /tail comes mostly from queue/.test(f)),
      d.findings.join('\n'),
    );
    const w = new RequestWindow(16);
    w.recordFailure('m', '1', 'x', 1, 'TIMEOUT');
    const failed = diagnoseWindow(w.summary('m', '1', 60_000), ctx);
    assert.equal(failed.dominant, 'none');
    assert.match(failed.findings.join('\n'), /TIMEOUT 1/);
  });
});

describe('diagnoseRequest', () => {
  it('flags a request whose dominant stage is far above the usual', () => {
    const typical = window(50, () => t({ queue_ms: 0.2, compute_ms: 5 }));
    const d = diagnoseRequest(t({ queue_ms: 40, compute_ms: 5 }), 'b64', 1, ctx, typical);
    assert.equal(d.dominant, 'queue');
    assert.match(d.findings[1] as string, /outlier/);
  });
});
