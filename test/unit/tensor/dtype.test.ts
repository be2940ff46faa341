import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  DTYPES,
  dtypeFromNpyDescr,
  dtypeFromSafetensors,
  dtypeSize,
  isDType,
  isFloatDType,
  npyDescr,
  safetensorsDType,
} from '../../../src/tensor/dtype.js';

test('dtype sizes', () => {
  const sizes = DTYPES.map((d) => [d, dtypeSize(d)]);
  assert.deepEqual(Object.fromEntries(sizes), {
    float32: 4,
    float64: 8,
    float16: 2,
    bfloat16: 2,
    int8: 1,
    uint8: 1,
    int16: 2,
    int32: 4,
    int64: 8,
    bool: 1,
  });
});

test('isDType accepts the ten names only', () => {
  for (const d of DTYPES) assert.ok(isDType(d));
  for (const v of ['float', 'FP32', 'uint16', 'toString', '', 3, null, undefined]) assert.equal(isDType(v), false);
});

test('isFloatDType', () => {
  assert.deepEqual(DTYPES.filter(isFloatDType), ['float32', 'float64', 'float16', 'bfloat16']);
});

test('numpy descrs map both ways; bfloat16 has none', () => {
  assert.equal(npyDescr('float32'), '<f4');
  assert.equal(npyDescr('float16'), '<f2');
  assert.equal(npyDescr('bool'), '|b1');
  assert.equal(npyDescr('uint8'), '|u1');
  assert.equal(npyDescr('int8'), '|i1');
  assert.equal(npyDescr('int64'), '<i8');
  assert.equal(npyDescr('bfloat16'), undefined);
  for (const d of DTYPES) {
    const descr = npyDescr(d);
    if (descr !== undefined) assert.equal(dtypeFromNpyDescr(descr), d);
  }
  assert.equal(dtypeFromNpyDescr('<u1'), 'uint8');
  assert.equal(dtypeFromNpyDescr('>f4'), undefined);
  assert.equal(dtypeFromNpyDescr('<u2'), undefined);
});

test('safetensors tags map both ways', () => {
  assert.deepEqual(DTYPES.map(safetensorsDType), [
    'F32',
    'F64',
    'F16',
    'BF16',
    'I8',
    'U8',
    'I16',
    'I32',
    'I64',
    'BOOL',
  ]);
  for (const d of DTYPES) assert.equal(dtypeFromSafetensors(safetensorsDType(d)), d);
  assert.equal(dtypeFromSafetensors('F8_E4M3'), undefined);
});
