import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FirstFitAllocator } from '../../../src/engines/torch/allocator.js';

test('allocates 64-byte aligned blocks first-fit and reuses freed space', () => {
  const a = new FirstFitAllocator(1024);
  assert.equal(a.allocate(10), 0);
  assert.equal(a.allocate(64), 64);
  assert.equal(a.allocate(65), 128);
  assert.equal(a.usedBytes, 64 + 64 + 128);
  a.release(64);
  assert.equal(a.allocate(1), 64, 'the freed hole is reused');
});

test('coalesces neighbours on free so large blocks fit again', () => {
  const a = new FirstFitAllocator(256);
  const offsets = [a.allocate(64), a.allocate(64), a.allocate(64), a.allocate(64)] as number[];
  assert.equal(a.allocate(1), undefined, 'full');
  for (const o of offsets) a.release(o);
  assert.equal(a.allocate(256), 0);
});

test('grow adds the new tail as free space', () => {
  const a = new FirstFitAllocator(128);
  assert.equal(a.allocate(128), 0);
  assert.equal(a.allocate(64), undefined);
  a.grow(512);
  assert.equal(a.allocate(384), 128);
  assert.equal(a.capacity, 512);
});
