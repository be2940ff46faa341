import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodedBase64Length, fromBase64, toBase64 } from '../../../src/tensor/base64.js';
import { DTYPES } from '../../../src/tensor/dtype.js';
import { fromNestedArray, toNestedArray } from '../../../src/tensor/nested.js';
import { SAMPLES, throwsCode } from './helpers.js';

test('every dtype round-trips through base64', () => {
  for (const dtype of DTYPES) {
    const [a, b, c, d] = SAMPLES[dtype];
    const t = fromNestedArray([[a, b, c, d]], dtype);
    const b64 = toBase64(t);
    assert.equal(b64, Buffer.from(t.data).toString('base64'));
    const back = fromBase64(dtype, [1, 4], b64);
    assert.deepEqual(toNestedArray(back), [[a, b, c, d]], dtype);
  }
});

test('known bytes: float32 [1, -2] is AACAPwAAAMA=', () => {
  assert.equal(toBase64(fromNestedArray([1, -2], 'float32')), 'AACAPwAAAMA=');
  assert.deepEqual(toNestedArray(fromBase64('float32', [2], 'AACAPwAAAMA=')), [1, -2]);
  assert.deepEqual(toNestedArray(fromBase64('float32', [2], 'AACAPwAAAMA')), [1, -2], 'padding is optional');
  assert.deepEqual(toNestedArray(fromBase64('uint8', [3], '-_8A')), [251, 255, 0], 'the URL-safe alphabet works');
  assert.deepEqual(fromBase64('float32', [0], '').shape, [0]);
});

test('decodedBase64Length counts bytes from the length and padding', () => {
  assert.equal(decodedBase64Length(''), 0);
  assert.equal(decodedBase64Length('AQ=='), 1);
  assert.equal(decodedBase64Length('AQ'), 1);
  assert.equal(decodedBase64Length('AQI='), 2);
  assert.equal(decodedBase64Length('AQI'), 2);
  assert.equal(decodedBase64Length('AQID'), 3);
  assert.equal(decodedBase64Length('AQIDBA=='), 4);
  assert.equal(decodedBase64Length('AQIDB'), -1);
  assert.equal(decodedBase64Length('AQI=='), -1);
});

test('a wrong byte count is BYTE_LENGTH_MISMATCH with expected vs got and the layout rule', () => {
  const b64 = Buffer.alloc(600000).toString('base64');
  const err = throwsCode(
    () => fromBase64('float32', [1, 3, 224, 224], b64),
    'BYTE_LENGTH_MISMATCH',
    /b64 decodes to 600000 bytes but float32\[1,3,224,224\] needs 602112 \(150528 elements x 4 bytes\)/,
    /raw little-endian row-major bytes/,
  );
  assert.deepEqual(err.data, { dtype: 'float32', shape: [1, 3, 224, 224], expected: 602112, got: 600000 });
  throwsCode(() => fromBase64('float64', [2], 'AACAPwAAAMA='), 'BYTE_LENGTH_MISMATCH', /needs 16/);
});

test('bad base64 is BAD_TENSOR and points at the bad character', () => {
  const e1 = throwsCode(() => fromBase64('float32', [2], 'AACAPwAA*MA='), 'BAD_TENSOR', /character "\*" at position 8/);
  assert.equal(e1.data.position, 8);
  throwsCode(() => fromBase64('float32', [2], 'AACA\nPwAAAMA'), 'BAD_TENSOR', /whitespace at position 4/, /one line/);
  throwsCode(() => fromBase64('float32', [2], 'AACAPw=AAAMA'), 'BAD_TENSOR', /"=" at position 6/);
  throwsCode(() => fromBase64('uint8', [1], 'AQIDB'), 'BAD_TENSOR', /5 characters, which is not a valid base64 length/);
  throwsCode(() => fromBase64('uint8', [8], 'AACAPwAAAM A='), 'BAD_TENSOR', /whitespace at position 10/);
});

test('maxBytes refuses oversize payloads before decoding', () => {
  const b64 = Buffer.alloc(4000).toString('base64');
  const err = throwsCode(
    () => fromBase64('float32', [1000], b64, { maxBytes: 1024 }),
    'INPUT_TOO_LARGE',
    /4000 bytes, over the 1024-byte limit/,
    /file path/,
  );
  assert.deepEqual(err.data, { bytes: 4000, maxBytes: 1024 });
  assert.equal(fromBase64('float32', [1000], b64, { maxBytes: 4000 }).data.byteLength, 4000);
});

test('bad shapes are refused', () => {
  throwsCode(() => fromBase64('float32', [-1], ''), 'BAD_TENSOR', /shape\[0\] is -1/);
});

test('too much padding is BAD_TENSOR', () => {
  throwsCode(() => fromBase64('uint8', [1], 'A==='), 'BAD_TENSOR', /at most two "=" padding/);
});

test('any character outside the alphabet is caught, wherever it is', () => {
  const bad = ['*', ' ', '\n', '.', '\u00e9', '!', '\t', '\0', '"'];
  for (let trial = 0; trial < 500; trial++) {
    const bytes = 1 + Math.floor(Math.random() * 40);
    const b64 = Buffer.from(Array.from({ length: bytes }, () => Math.floor(Math.random() * 256))).toString('base64');
    const at = Math.floor(Math.random() * b64.replace(/=+$/, '').length);
    const ch = bad[trial % bad.length] as string;
    const replaced = b64.slice(0, at) + ch + b64.slice(at + 1);
    throwsCode(() => fromBase64('uint8', [bytes], replaced), 'BAD_TENSOR');
    const inserted = b64.slice(0, at) + ch + ch + ch + ch + b64.slice(at);
    assert.throws(() => fromBase64('uint8', [bytes], inserted), /b64/);
  }
});
