import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway.js';
import { tensorSource } from '../../src/tensor/source.js';
import { openGateway } from '../helpers/gateway.js';
import { PYTHON } from '../helpers/models.js';

/**
 * The onnx engine computes in a worker thread: while a forward pass of tens of milliseconds runs,
 * the gateway's event loop keeps turning. onnxruntime-node's own `run` computes on the calling
 * thread, so in the main thread the loop would stall for the whole pass.
 */

describe('the onnx engine off the event loop', { timeout: 120_000 }, () => {
  let gateway: Gateway;

  before(async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-onnx-thread-'));
    const dir = join(work, 'wide');
    mkdirSync(join(dir, '1'), { recursive: true });
    // About 4 GFLOP for 1024 rows, tens of milliseconds on one core; a small output.
    execFileSync(PYTHON, [
      '-c',
      `import torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 8)).eval()
torch.onnx.export(m, (torch.zeros(2, 1024),), ${JSON.stringify(join(dir, '1', 'model.onnx'))}, input_names=['x'],
                  output_names=['y'], dynamic_shapes=({0: torch.export.Dim('b', min=1)},), external_data=False,
                  verbose=False)`,
    ]);
    writeFileSync(
      join(dir, 'config.json'),
      JSON.stringify({
        name: 'wide',
        engine: 'onnx',
        inputs: [{ name: 'x', dtype: 'float32', shape: [-1, 1024] }],
        outputs: [{ name: 'y', dtype: 'float32', shape: [-1, 8] }],
        versions: { '1': { format: 'onnx', file: 'model.onnx' } },
      }),
    );
    gateway = await openGateway(work);
    await gateway.register(dir);
  });

  after(async () => {
    await gateway?.close();
  });

  it('keeps the event loop turning while a forward pass runs', async () => {
    const rows = 1024;
    const data = new Uint8Array(new Float32Array(rows * 1024).fill(0.5).buffer);
    const run = () =>
      gateway.inferTensors({
        model: 'wide',
        inputs: new Map([['x', tensorSource({ dtype: 'float32', shape: [rows, 1024], data })]]),
        form: 'binary',
      });
    await run();
    // A 2 ms ticker: while the loop turns, it ticks every couple of milliseconds; a loop blocked
    // by a forward pass gets a tick or two in between passes, however long they are.
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 2);
    const computeMs: number[] = [];
    const passes = 8;
    try {
      for (let i = 0; i < passes; i++) {
        const result = await run();
        computeMs.push(result.timings.compute_ms);
        assert.deepEqual(result.outputs[0]?.tensor.shape, [rows, 8]);
      }
    } finally {
      clearInterval(ticker);
    }
    const median = computeMs.sort((a, b) => a - b)[computeMs.length >> 1] as number;
    assert.ok(median > 10, `the forward pass is long enough to tell: median ${median} ms`);
    assert.ok(ticks >= 4 * passes, `the loop ticked ${ticks} times during ${passes} passes of ~${median} ms`);
  });
});
