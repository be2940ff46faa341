import assert from 'node:assert/strict';
import { test } from 'node:test';
import { instanceCpus } from '../../../src/registry/model-config.js';

test('each instance gets its own run of the CPUs when there is one for each, as even as they come', () => {
  const shares = (cpus: number[], instances: number) =>
    Array.from({ length: instances }, (_, i) => instanceCpus(cpus, instances, i));
  assert.deepEqual(shares([4, 5, 6, 7], 1), [[4, 5, 6, 7]]);
  assert.deepEqual(shares([4, 5, 6, 7], 2), [
    [4, 5],
    [6, 7],
  ]);
  assert.deepEqual(shares([0, 1, 2, 3, 4], 2), [
    [0, 1, 2],
    [3, 4],
  ]);
  assert.deepEqual(shares([1, 3, 5], 3), [[1], [3], [5]]);
  assert.deepEqual(shares([0, 1, 2, 3, 4, 5, 6], 3), [
    [0, 1, 2],
    [3, 4],
    [5, 6],
  ]);
});

test('instances that outnumber the CPUs all get every one of them', () => {
  assert.deepEqual(instanceCpus([2, 3], 3, 0), [2, 3]);
  assert.deepEqual(instanceCpus([2, 3], 3, 2), [2, 3]);
});
