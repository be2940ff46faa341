import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ChunkedBody } from '../../../src/http/body.js';
import { parseInferRequest } from '../../../src/oip/infer-codec.js';
import { SharedMemoryRegistry } from '../../../src/oip/shared-memory.js';
import type { TensorSource } from '../../../src/tensor/source.js';

const ctx = { maxArrayElements: 1000, regions: new SharedMemoryRegistry() };

/** An OIP binary request body cut into chunks of `size` bytes, as the socket reads delivered it. */
function request(header: object, tails: Uint8Array[], size: number): { body: ChunkedBody; headerLength: string } {
  const json = Buffer.from(JSON.stringify(header));
  const whole = Buffer.concat([json, ...tails]);
  const chunks: Buffer[] = [];
  for (let start = 0; start < whole.length; start += size) chunks.push(whole.subarray(start, start + size));
  return { body: new ChunkedBody(chunks, whole.length), headerLength: String(json.length) };
}

function filled(source: TensorSource): Buffer {
  const target = Buffer.alloc(source.byteLength);
  source.fill(target);
  return target;
}

const a = new Uint8Array(new Float32Array([1, 2, 3, 4, 5, 6]).buffer);
const b = new Uint8Array(new Float32Array([0.5, -1]).buffer);
const header = {
  id: 'r1',
  inputs: [
    { name: 'a', datatype: 'FP32', shape: [2, 3], parameters: { binary_data_size: a.byteLength } },
    { name: 'b', datatype: 'FP32', shape: [1, 2], parameters: { binary_data_size: b.byteLength } },
  ],
};

test('binary inputs spread over many socket reads are filled straight from the chunks', () => {
  const { body, headerLength } = request(header, [a, b], 5);
  const parsed = parseInferRequest(body, headerLength, ctx);
  assert.equal(parsed.id, 'r1');
  assert.equal(parsed.form, 'binary');
  const sa = parsed.inputs.get('a') as TensorSource;
  const sb = parsed.inputs.get('b') as TensorSource;
  assert.deepEqual([sa.dtype, sa.shape, sa.byteLength, sa.data], ['float32', [2, 3], 24, undefined]);
  assert.deepEqual(filled(sa), Buffer.from(a));
  assert.deepEqual(filled(sb), Buffer.from(b));
});

test('a binary input inside one socket read stays a view of it', () => {
  const { body, headerLength } = request(header, [a, b], 1 << 16);
  const source = parseInferRequest(body, headerLength, ctx).inputs.get('a') as TensorSource;
  assert.ok(source.data, 'in memory already: no fill needed');
  assert.deepEqual(Buffer.from(source.data), Buffer.from(a));
});

test('a spanning input of the wrong size is BYTE_LENGTH_MISMATCH, and trailing bytes are refused', () => {
  const short = { inputs: [{ name: 'a', datatype: 'FP32', shape: [2, 3], parameters: { binary_data_size: 20 } }] };
  const bad = request(short, [a.subarray(0, 20)], 5);
  assert.throws(() => parseInferRequest(bad.body, bad.headerLength, ctx), {
    code: 'BYTE_LENGTH_MISMATCH',
    message: /input "a": .*needs 24 bytes/,
  });
  const extra = request(header, [a, b, new Uint8Array(3)], 5);
  assert.throws(() => parseInferRequest(extra.body, extra.headerLength, ctx), {
    code: 'INVALID_REQUEST',
    message: /3 bytes after the last input/,
  });
});

test('BYTES items that span socket reads arrive whole', () => {
  const items = [Buffer.from('first item'), Buffer.from('second')];
  const serialised = Buffer.concat(
    items.flatMap((item) => {
      const length = Buffer.alloc(4);
      length.writeUInt32LE(item.length);
      return [length, item];
    }),
  );
  const bytesHeader = {
    inputs: [{ name: 't', datatype: 'BYTES', shape: [2], parameters: { binary_data_size: serialised.length } }],
  };
  const { body, headerLength } = request(bytesHeader, [serialised], 3);
  const source = parseInferRequest(body, headerLength, ctx).inputs.get('t') as TensorSource;
  assert.equal(source.bytes, true);
  assert.deepEqual(filled(source), serialised);
});
