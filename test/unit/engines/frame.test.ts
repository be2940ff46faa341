import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeFrame, FrameDecoder } from '../../../src/engines/torch/frame.js';

test('decodes frames split and joined at arbitrary byte boundaries', () => {
  const messages = [
    { op: 'hello', pid: 1 },
    { id: 2, ok: true, result: { text: 'é ✓' } },
    { op: 'release', offsets: [] },
  ];
  const stream = Buffer.concat(messages.map(encodeFrame));
  for (const chunkSize of [1, 3, 7, stream.length]) {
    const decoder = new FrameDecoder();
    const seen: unknown[] = [];
    for (let i = 0; i < stream.length; i += chunkSize) seen.push(...decoder.push(stream.subarray(i, i + chunkSize)));
    assert.deepEqual(seen, messages, `chunk size ${chunkSize}`);
  }
});

test('rejects absurd frame lengths instead of buffering forever', () => {
  const decoder = new FrameDecoder();
  const bad = Buffer.alloc(4);
  bad.writeUInt32LE(0xffffffff, 0);
  assert.throws(() => decoder.push(bad), /exceeds/);
});
