import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { NamedTensor } from '../../src/engines/engine.js';
import type { Gateway, TensorInferenceResult } from '../../src/gateway.js';
import { SharedMemoryRegistry } from '../../src/oip/shared-memory.js';
import { encodeNpy } from '../../src/tensor/npy.js';
import { type OutputSink, type TensorSource, tensorSource } from '../../src/tensor/source.js';
import { makeTensor, toNumbers } from '../../src/tensor/tensor.js';
import { modelCopy, openGateway } from '../helpers/gateway.js';
import { ensureDigitsModels, ensureTestModels, PYTHON } from '../helpers/models.js';

/**
 * Inputs read and outputs written by the worker itself (TensorSource.file, OutputSink): a real
 * gateway, real torch workers, real /dev/shm regions and `.npy` files. The region sources here
 * refuse to be filled by the gateway, so a request only succeeds when the worker read its bytes;
 * batches mix them with rows in memory. Outputs the worker wrote are not in the answer at all.
 */

const ROW = 4;

describe('files the worker reads and writes itself', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let work: string;
  const regions = new SharedMemoryRegistry();
  const keys: string[] = [];

  /** A registered region holding `rows` (float32), as a client would make it. */
  function region(name: string, rows: number[][]): string {
    const key = `/tg_test_reads_${process.pid}_${name}`;
    writeFileSync(`/dev/shm${key}`, Buffer.from(new Float32Array(rows.flat()).buffer));
    keys.push(key);
    regions.register(name, { key, byte_size: rows.length * ROW * 4 });
    return key;
  }

  /** Rows `first..first+count` of a region as an input, which only the worker may read. */
  function fromRegion(name: string, first: number, count: number): TensorSource {
    const source = regions.get(name).input('x', 'float32', [count, ROW], first * ROW * 4, count * ROW * 4);
    assert.ok(source.file?.path.startsWith(`/proc/${process.pid}/fd/`));
    return {
      ...source,
      fill: () => {
        throw new Error('filled by the gateway: the worker should have read this region');
      },
    };
  }

  const inMemory = (rows: number[][]) =>
    tensorSource(makeTensor('float32', [rows.length, ROW], new Uint8Array(new Float32Array(rows.flat()).buffer)));

  const doubled = (answer: TensorInferenceResult) => [...toNumbers((answer.outputs[0] as NamedTensor).tensor)];

  const infer = (x: TensorSource, sinks?: OutputSink[]) =>
    gateway.inferTensors({
      model: 'sleepy-batched',
      inputs: new Map([['x', x]]),
      form: 'binary',
      ...(sinks ? { sinks } : {}),
    });

  /** A region of `bytes` bytes of 0xee for outputs, as a client would make it. */
  function outputRegion(name: string, bytes: number): string {
    const key = `/tg_test_writes_${process.pid}_${name}`;
    writeFileSync(`/dev/shm${key}`, Buffer.alloc(bytes, 0xee));
    keys.push(key);
    regions.register(name, { key, byte_size: bytes });
    return key;
  }

  /** The float32 values at [offset, offset + bytes) of a region's object. */
  const regionValues = (key: string, offset: number, bytes: number) => {
    const all = readFileSync(`/dev/shm${key}`);
    return [...new Float32Array(all.buffer.slice(all.byteOffset + offset, all.byteOffset + offset + bytes))];
  };

  const sink = (name: string, offset: number, size: number) =>
    regions.get(name).outputSink('y', offset, size) as OutputSink;

  before(async () => {
    const models = ensureTestModels();
    work = mkdtempSync(join(tmpdir(), 'tg-reads-'));
    gateway = await openGateway(work);
    // sleepy answers x * 2; a 300 ms delay makes concurrent calls one batch.
    await gateway.register(
      modelCopy(models, 'sleepy', work, 'sleepy-batched', (c) => {
        c.batching = { max_batch_size: 8, max_queue_delay_us: 300_000, adaptive_delay: false };
      }),
    );
  });

  after(async () => {
    await gateway.close();
    regions.close();
    for (const key of keys) rmSync(`/dev/shm${key}`, { force: true });
  });

  it('batches region rows with rows in memory and answers each caller its own, bit for bit', async () => {
    region('a', [
      [1, 2, 3, 4],
      [0.1, -0.2, 1e-7, 3e38],
    ]);
    region('b', [
      [9, 8, 7, 6],
      [5, 4, 3, 2],
      [-1, -2, -3, -4],
    ]);
    // Each call and the rows it sends: sleepy answers them doubled.
    const calls: { x: TensorSource; rows: number[][] }[] = [
      { x: fromRegion('a', 1, 1), rows: [[0.1, -0.2, 1e-7, 3e38]] },
      { x: inMemory([[5, 6, 7, 8]]), rows: [[5, 6, 7, 8]] },
      {
        x: fromRegion('b', 1, 2),
        rows: [
          [5, 4, 3, 2],
          [-1, -2, -3, -4],
        ],
      },
      { x: fromRegion('a', 0, 1), rows: [[1, 2, 3, 4]] },
    ];
    const answers = await Promise.all(calls.map(({ x }) => infer(x)));
    assert.deepEqual(gateway.poolStats('sleepy-batched', '1')?.batches, { 5: 1 }, 'one forward pass of 5 rows');
    for (const [i, { rows }] of calls.entries()) {
      const answer = answers[i] as TensorInferenceResult;
      assert.equal(answer.batch_size, 5);
      assert.deepEqual(
        doubled(answer),
        rows.flat().map((v) => Math.fround(Math.fround(v) * 2)),
        `call ${i}`,
      );
    }
  });

  it('fails only the request whose region was cut short before the worker read it', async () => {
    const key = region('short', [
      [1, 1, 1, 1],
      [2, 2, 2, 2],
    ]);
    region('whole', [[3, 3, 3, 3]]);
    const pids = gateway.poolStats('sleepy-batched', '1')?.pids;
    const calls = [infer(fromRegion('whole', 0, 1)), infer(fromRegion('short', 0, 2)), infer(inMemory([[4, 4, 4, 4]]))];
    // The requests were checked against the region when they came; the batch waits 300 ms.
    truncateSync(`/dev/shm${key}`, 20);
    const [whole, short, memory] = await Promise.allSettled(calls);
    assert.equal(whole?.status, 'fulfilled');
    assert.equal(memory?.status, 'fulfilled');
    assert.deepEqual(doubled(whole.value), [6, 6, 6, 6]);
    assert.deepEqual(doubled(memory.value), [8, 8, 8, 8]);
    assert.equal(short?.status, 'rejected');
    const reason = short.reason as { code: string; message: string };
    assert.equal(reason.code, 'SHARED_MEMORY_OUT_OF_RANGE');
    assert.match(reason.message, /^input "x": region "short" ended after 20 of 32 bytes$/);
    assert.deepEqual(gateway.poolStats('sleepy-batched', '1')?.pids, pids, 'no worker crashed or restarted');
  });

  it('fails only the .npy input cut short before the worker read it, naming the input', async () => {
    const rows = (n: number) => new Float32Array(n * ROW).map((_, i) => i - 3.5);
    const npy = (name: string, n: number) => {
      const path = join(work, `${name}.npy`);
      writeFileSync(path, encodeNpy({ dtype: 'float32', shape: [n, ROW], data: new Uint8Array(rows(n).buffer) }));
      return path;
    };
    // Large enough that the gateway reads the data only when the batch goes (a small file comes in whole).
    const whole = npy('whole', 512);
    const short = npy('short', 512);
    const pids = gateway.poolStats('sleepy-batched', '1')?.pids;
    const [answered, cut] = await Promise.allSettled([
      gateway.infer({ model: 'sleepy-batched', inputs: { x: { path: whole } } }),
      (async () => {
        const call = gateway.infer({ model: 'sleepy-batched', inputs: { x: { path: short } } });
        // Decoded (header checked, size exact) at once; read when the batch goes, 300 ms later.
        await new Promise((r) => setTimeout(r, 50));
        truncateSync(short, 128 + 100);
        return call;
      })(),
    ]);
    assert.equal(answered.status, 'fulfilled');
    const out = gateway.store.get(answered.value.outputs[0]?.uri as string).tensor;
    assert.deepEqual(
      [...toNumbers(out)],
      [...rows(512)].map((v) => v * 2),
    );
    assert.equal(cut.status, 'rejected');
    const reason = cut.reason as { code: string; message: string };
    assert.equal(reason.code, 'BAD_TENSOR');
    // The worker's words: it read the span, through the descriptor the gateway opened for it.
    assert.match(reason.message, new RegExp(`^input "x": ${short} ended after 100 of 8192 bytes$`));
    assert.deepEqual(gateway.poolStats('sleepy-batched', '1')?.pids, pids, 'no worker crashed or restarted');
  });

  it('refuses a .npy input swapped for a link leading outside the roots before the worker read it', async () => {
    const rows = new Float32Array(512 * ROW).map((_, i) => i);
    const npy = encodeNpy({ dtype: 'float32', shape: [512, ROW], data: new Uint8Array(rows.buffer) });
    const kept = join(work, 'kept.npy');
    const swapped = join(work, 'swapped.npy');
    writeFileSync(kept, npy);
    writeFileSync(swapped, npy);
    // A file outside the allowed roots with a valid header of the same size: only its data differs.
    const outside = mkdtempSync(join(tmpdir(), 'tg-outside-'));
    const secret = join(outside, 'secret.npy');
    writeFileSync(secret, Buffer.concat([npy.subarray(0, npy.byteLength - rows.byteLength), Buffer.alloc(8192, 0)]));
    try {
      const [answered, refused] = await Promise.allSettled([
        gateway.infer({ model: 'sleepy-batched', inputs: { x: { path: kept } } }),
        (async () => {
          const call = gateway.infer({ model: 'sleepy-batched', inputs: { x: { path: swapped } } });
          // Checked and its header read at once; its data is read when the batch goes, 300 ms later.
          await new Promise((r) => setTimeout(r, 50));
          rmSync(swapped);
          symlinkSync(secret, swapped);
          return call;
        })(),
      ]);
      assert.equal(answered.status, 'fulfilled');
      const out = gateway.store.get(answered.value.outputs[0]?.uri as string).tensor;
      assert.deepEqual(
        [...toNumbers(out)],
        [...rows].map((v) => v * 2),
      );
      assert.equal(refused.status, 'rejected', 'the outside file was read as the input');
      const reason = refused.reason as { code: string; message: string };
      assert.equal(reason.code, 'FILE_NOT_FOUND');
      assert.match(reason.message, new RegExp(`^${swapped} was replaced by another file before it could be read$`));
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it('writes every caller its output rows into its region, and reads back none of a batch whose rows all went there', async () => {
    const key = outputRegion('out', 64);
    const [first, second] = [sink('out', 0, 16), sink('out', 24, 32)];
    const answers = await Promise.all([
      infer(inMemory([[1, 2, 3, 4]]), [first]),
      infer(
        inMemory([
          [5, 6, 7, 8],
          [-1, 0.5, 1e-7, 3e38],
        ]),
        [second],
      ),
    ]);
    assert.deepEqual(
      answers.map((a) => a.batch_size),
      [3, 3],
      'one forward pass of 3 rows',
    );
    assert.ok(first.written && second.written, 'the worker wrote both');
    for (const answer of answers) {
      const y = answer.outputs[0] as NamedTensor;
      assert.equal(y.written, true);
      assert.equal(y.tensor.data.byteLength, 0, 'nothing read back from the worker');
    }
    assert.deepEqual(
      answers.map((a) => (a.outputs[0] as NamedTensor).tensor.shape),
      [
        [1, ROW],
        [2, ROW],
      ],
    );
    assert.deepEqual(regionValues(key, 0, 16), [2, 4, 6, 8]);
    assert.deepEqual(
      regionValues(key, 24, 32),
      [5, 6, 7, 8, -1, 0.5, 1e-7, 3e38].map((v) => Math.fround(Math.fround(v) * 2)),
    );
    const untouched = readFileSync(`/dev/shm${key}`).subarray(16, 24);
    assert.deepEqual([...untouched], Array(8).fill(0xee));
  });

  it('reads back the rows of callers without a region, and leaves an output too large for its space to the gateway', async () => {
    const key = outputRegion('mixed', 48);
    const fits = sink('mixed', 0, 16);
    const tooSmall = sink('mixed', 16, 12); // one row is 16 bytes
    const [written, small, plain] = await Promise.all([
      infer(inMemory([[1, 1, 1, 1]]), [fits]),
      infer(inMemory([[2, 2, 2, 2]]), [tooSmall]),
      infer(inMemory([[3, 3, 3, 3]])),
    ]);
    assert.equal(fits.written, true);
    assert.equal(tooSmall.written, false, 'the worker does not write past the space given');
    assert.deepEqual(regionValues(key, 0, 16), [2, 2, 2, 2]);
    assert.deepEqual([...readFileSync(`/dev/shm${key}`).subarray(16)], Array(32).fill(0xee));
    // Not every row of the batch went to a region: the output came back whole, each caller its rows.
    assert.deepEqual(doubled(written), [2, 2, 2, 2]);
    assert.deepEqual(doubled(small), [4, 4, 4, 4]);
    assert.deepEqual(doubled(plain), [6, 6, 6, 6]);
    assert.equal((plain.outputs[0] as NamedTensor).written, undefined);
  });

  it('keeps a region open for its worker after the request was cancelled and the region unregistered', async () => {
    region('late_in', [[7, 7, 7, 7]]);
    const outKey = outputRegion('late_out', 16);
    // What the OIP route holds from parse to answer.
    const requestHolds = [regions.get('late_in').acquire(), regions.get('late_out').acquire()];
    const late = sink('late_out', 0, 16);
    const fd = late.path.split('/').pop() as string;
    const stillOpen = () => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === `/dev/shm${outKey}`;
      } catch {
        return false;
      }
    };
    const cancel = new AbortController();
    const call = gateway.inferTensors(
      { model: 'sleepy-batched', inputs: new Map([['x', fromRegion('late_in', 0, 1)]]), form: 'binary', sinks: [late] },
      { signal: cancel.signal },
    );
    // The batch goes after 300 ms; the worker then sleeps 500 ms before it answers.
    await new Promise((r) => setTimeout(r, 450));
    cancel.abort();
    await assert.rejects(call, { code: 'CANCELLED' });
    regions.unregister('late_in');
    regions.unregister('late_out');
    for (const release of requestHolds) release();
    assert.ok(stillOpen(), 'the worker may still write there: the descriptor is not closed (nor reused)');
    // The next request runs once the worker has answered the cancelled one.
    await infer(inMemory([[1, 1, 1, 1]]));
    assert.equal(stillOpen(), false, 'closed once the worker was done with it');
    assert.deepEqual(regionValues(outKey, 0, 16), [14, 14, 14, 14], 'the worker wrote the region it was given');
  });

  it('reads a large image file given by path in the worker; one cut short fails alone, in the words of the worker', async () => {
    const digits = ensureDigitsModels();
    await gateway.register(
      modelCopy(digits, 'digits', work, 'digits-batched', (c) => {
        c.batching = { max_batch_size: 8, max_queue_delay_us: 300_000, adaptive_delay: false };
      }),
    );
    const examples = join(digits, 'digits', 'examples');
    const [example, label] = Object.entries(JSON.parse(readFileSync(join(examples, 'labels.json'), 'utf8')))[0] as [
      string,
      number,
    ];
    // A scan blown up into an uncompressed BMP: far larger than what the gateway reads whole.
    const bmp = (file: string) => {
      const path = join(work, file);
      const script = `from PIL import Image\nImage.open(${JSON.stringify(join(examples, example))}).convert("RGB").resize((256, 256), Image.NEAREST).save(${JSON.stringify(path)}, "BMP")`;
      execFileSync(PYTHON, ['-c', script]);
      return path;
    };
    const whole = bmp('whole.bmp');
    const cut = bmp('cut.bmp');
    const size = statSync(cut).size;
    assert.ok(size > 128 * 1024, `${size} bytes`);
    const pids = gateway.poolStats('digits-batched', '1')?.pids;
    const [answered, failed] = await Promise.allSettled([
      gateway.infer({ model: 'digits-batched', inputs: { image: whole } }),
      (async () => {
        const call = gateway.infer({ model: 'digits-batched', inputs: { image: cut } });
        // Its first bytes checked at once; the file read when the batch goes, 300 ms later.
        await new Promise((r) => setTimeout(r, 50));
        truncateSync(cut, 1000);
        return call;
      })(),
    ]);
    assert.equal(answered.status, 'fulfilled');
    assert.equal(answered.value.predictions?.[0]?.[0]?.label, String(label));
    assert.equal(failed.status, 'rejected');
    const reason = failed.reason as { code: string; message: string };
    assert.equal(reason.code, 'BAD_TENSOR');
    // The worker's words: it read the file itself, through the descriptor the gateway opened for it.
    assert.match(reason.message, new RegExp(`^input "image": ${cut} ended after 1000 of ${size} bytes$`));
    assert.deepEqual(gateway.poolStats('digits-batched', '1')?.pids, pids, 'no worker crashed or restarted');
  });
});
