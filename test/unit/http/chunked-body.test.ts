import assert from 'node:assert/strict';
import { closeSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ChunkedBody } from '../../../src/http/body.js';

/** A body of `length` bytes (byte i = i % 251) cut into chunks of `size` bytes, as a socket delivers it. */
function chunked(length: number, size: number): { body: ChunkedBody; whole: Buffer } {
  const whole = Buffer.from(Array.from({ length }, (_, i) => i % 251));
  const chunks: Buffer[] = [];
  for (let start = 0; start < length; start += size) chunks.push(whole.subarray(start, start + size));
  return { body: new ChunkedBody(chunks, length), whole };
}

test('a range inside one chunk is a view of it, a range across chunks is undefined as a view', () => {
  const { body, whole } = chunked(100, 30);
  const view = body.view(35, 50) as Buffer;
  assert.deepEqual(view, whole.subarray(35, 50));
  view[0] = 0; // a view writes through: no copy was made
  assert.equal(whole[35], 0);
  assert.equal(body.view(25, 35), undefined);
  assert.deepEqual(body.view(60, 90), whole.subarray(60, 90), 'a range ending at a chunk boundary is a view');
  assert.deepEqual(body.view(42, 42), Buffer.alloc(0));
});

test('slice and copyTo give the bytes of any range, across any number of chunks', () => {
  const { body, whole } = chunked(1000, 7);
  for (const [start, end] of [
    [0, 1000],
    [0, 7],
    [3, 4],
    [5, 19],
    [6, 8],
    [993, 1000],
    [500, 500],
  ] as const) {
    assert.deepEqual(body.slice(start, end), whole.subarray(start, end), `slice [${start}, ${end})`);
    const target = Buffer.alloc(end - start + 2, 0xee);
    body.copyTo(target.subarray(1, 1 + end - start), start, end);
    assert.deepEqual(target.subarray(1, 1 + end - start), whole.subarray(start, end), `copyTo [${start}, ${end})`);
    assert.equal(target[0], 0xee, 'nothing written before the target');
    assert.equal(target[target.length - 1], 0xee, 'nothing written after the target');
  }
});

test('an empty body and a body of one chunk', () => {
  const empty = new ChunkedBody([], 0);
  assert.equal(empty.slice(0, 0).length, 0);
  const { body, whole } = chunked(64, 64);
  assert.equal(body.slice(0, 64).buffer, whole.buffer, 'a one-chunk body is never copied');
  assert.throws(() => body.view(64, 65), RangeError);
});

test('text decodes any range as UTF-8, multi-byte characters split across chunks included', () => {
  const source = Buffer.from('{"caption": "naïve café — 東京", "b64": "QUJD"}');
  for (const size of [1, 2, 3, 7, source.length]) {
    const chunks: Buffer[] = [];
    for (let start = 0; start < source.length; start += size) chunks.push(source.subarray(start, start + size));
    const body = new ChunkedBody(chunks, source.length);
    assert.equal(body.text(0, source.length), source.toString('utf8'), `chunks of ${size}`);
    assert.equal(body.text(2, 9), source.toString('utf8', 2, 9), `chunks of ${size}`);
  }
  // A second, shorter body decoded after a longer one reads only its own bytes from the scratch buffer.
  const short = chunked(10, 3);
  assert.equal(short.body.text(0, 10), short.whole.toString('utf8'));
  // Past the scratch buffer's size a body is joined in a buffer of its own, and decodes the same.
  const big = chunked(5 * 1024 * 1024, 65536);
  assert.equal(big.body.text(0, big.whole.length), big.whole.toString('utf8'));
});

test('writeTo writes a range across chunks into a file at a position, and nothing else', () => {
  const { body, whole } = chunked(200_000, 65_536);
  const path = join(tmpdir(), `tg-chunked-${process.pid}`);
  const fd = openSync(path, 'w+');
  try {
    body.writeTo(fd, 1000, 150_000, 64);
    const file = readFileSync(path);
    assert.equal(file.length, 64 + 149_000);
    assert.ok(file.subarray(0, 64).equals(Buffer.alloc(64)));
    assert.ok(file.subarray(64).equals(whole.subarray(1000, 150_000)));
  } finally {
    closeSync(fd);
    rmSync(path, { force: true });
  }
});
