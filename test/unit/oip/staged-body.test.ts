import assert from 'node:assert/strict';
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { StagedBody } from '../../../src/oip/data-plane/staged-body.js';

/**
 * A request body staged by a data-plane thread: the header in memory, the tensor bytes in a real
 * file from a position on. Its space is given back once, when the request is answered and the
 * last worker read of it is done, and never before.
 */
describe('StagedBody', () => {
  const path = join(tmpdir(), `tg-staged-${process.pid}`);
  let fd: number;
  const header = Buffer.from('{"inputs":[]}');
  const tensor = Buffer.from(new Float32Array([1.5, -2, 3.25, 4]).buffer);
  const position = 4096;

  before(() => {
    fd = openSync(path, 'w+');
    writeSync(fd, Buffer.alloc(position, 0xee), 0, position, 0);
    writeSync(fd, tensor, 0, tensor.length, position);
  });
  after(() => {
    closeSync(fd);
    rmSync(path, { force: true });
  });

  const body = (onFree: () => void = () => {}) =>
    new StagedBody(Buffer.from(header), header.length + tensor.length, fd, position, onFree);

  it('reads the header from memory and the rest from the file', () => {
    const b = body();
    assert.equal(b.text(0, header.length), header.toString());
    assert.ok(b.slice(header.length, b.length).equals(tensor));
    // A range across the two is joined.
    assert.ok(b.slice(2, b.length).equals(Buffer.concat([header.subarray(2), tensor])));
  });

  it('gives a tensor as a span of the file for the worker, and fills it when asked', () => {
    const source = body().tensor(header.length, header.length + tensor.length, 'float32', [1, 4]);
    assert.equal(source.file?.path, `/proc/${process.pid}/fd/${fd}`);
    assert.equal(source.file?.position, position);
    const target = new Uint8Array(tensor.length);
    source.fill(target);
    assert.ok(Buffer.from(target).equals(tensor));
    assert.throws(() => body().tensor(header.length, header.length + 8, 'float32', [1, 4]));
  });

  it('frees its space once answered and unread, once only', () => {
    let freed = 0;
    const b = body(() => freed++);
    const source = b.tensor(header.length, header.length + tensor.length, 'float32', [1, 4]);
    const release = source.file?.hold?.() as () => void;
    b.done();
    assert.equal(freed, 0, 'freed while a worker may still read it');
    release();
    release();
    assert.equal(freed, 1);
    b.done();
    assert.equal(freed, 1);

    let early = 0;
    const unread = body(() => early++);
    unread.done();
    assert.equal(early, 1);
  });
});
