import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { EngineRequest, EngineResponse } from '../../../src/engines/engine.js';
import { joinRequests, splitResponse } from '../../../src/scheduler/batch.js';
import { allRowsWritten, type OutputSink, type SinkRows, tensorSource } from '../../../src/tensor/source.js';
import { makeTensor } from '../../../src/tensor/tensor.js';

/** Output sinks through a batch: each member's rows of the batch's outputs, and which are all written. */

const sink = (output: string, position = 0): OutputSink => ({
  output,
  path: '/proc/1/fd/3',
  position,
  capacity: 1 << 20,
  written: false,
});

function request(rows: number, sinks?: SinkRows[]): EngineRequest {
  const data = new Uint8Array(new Float32Array(rows * 2).buffer);
  return {
    inputs: [{ name: 'x', tensor: tensorSource(makeTensor('float32', [rows, 2], data)) }],
    precision: 'fp32',
    ...(sinks ? { sinks } : {}),
  };
}

describe('output sinks in a batch', () => {
  it('give each member its own rows of the joined request', () => {
    const [a, b, c] = [sink('y'), sink('y', 64), sink('z')];
    const joined = joinRequests([
      request(2, [{ sink: a, row: 0 }]),
      request(1),
      request(3, [
        { sink: b, row: 0 },
        { sink: c, row: 1, rows: 2 },
      ]),
    ]);
    assert.deepEqual(joined.sinks, [
      { sink: a, row: 0, rows: 2 },
      { sink: b, row: 3, rows: 3 },
      { sink: c, row: 4, rows: 2 },
    ]);
    assert.equal(joinRequests([request(2), request(1)]).sinks, undefined);
  });

  it('are all of an output only when their rows together cover it, a row named twice counted once', () => {
    const rows = (row: number, n?: number): SinkRows => ({
      sink: sink('y'),
      row,
      ...(n !== undefined ? { rows: n } : {}),
    });
    assert.equal(allRowsWritten([rows(0)], 4), true);
    assert.equal(allRowsWritten([rows(2, 2), rows(0, 2)], 4), true);
    assert.equal(allRowsWritten([rows(0, 2), rows(0, 2)], 4), false, 'the same rows in two regions');
    assert.equal(allRowsWritten([rows(0, 1), rows(2)], 4), false, 'a row between');
    assert.equal(allRowsWritten([], 4), false);
    assert.equal(allRowsWritten([rows(0)], 0), false, 'no rows: nothing to skip reading');
  });

  it('split a written output into empty parts that say so, each with its rows', () => {
    const timings = { fillMs: 0, transferMs: 0, computeMs: 0 };
    const response: EngineResponse = {
      outputs: [
        { name: 'y', written: true, tensor: { dtype: 'float32', shape: [3, 2], data: new Uint8Array(0) } },
        { name: 'z', tensor: makeTensor('float32', [3], new Uint8Array(new Float32Array([1, 2, 3]).buffer)) },
      ],
      timings,
    };
    const [first, second] = splitResponse(response, [1, 2]);
    assert.deepEqual(
      first?.outputs.map((o) => [o.name, o.written, o.tensor.shape, o.tensor.data.byteLength]),
      [
        ['y', true, [1, 2], 0],
        ['z', undefined, [1], 4],
      ],
    );
    assert.deepEqual(second?.outputs[0]?.tensor.shape, [2, 2]);
  });
});
