import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { DTYPES, dtypeSize } from '../../../src/tensor/dtype.js';
import { fromNestedArray, toNestedArray } from '../../../src/tensor/nested.js';
import { decodeSafetensors, encodeSafetensors } from '../../../src/tensor/safetensors.js';
import { makeTensor } from '../../../src/tensor/tensor.js';
import { SAMPLES, throwsCode } from './helpers.js';
import { runPython, safetensorsSkip, withTempDir } from './python.js';

/** A hand-built file: header JSON (padded to 8 bytes with spaces) and data. */
function file(header: unknown, data: Uint8Array = new Uint8Array(0)): Buffer {
  const json = Buffer.from(JSON.stringify(header));
  const len = Math.ceil(json.length / 8) * 8;
  const out = Buffer.alloc(8 + len + data.length, 0x20);
  out.writeBigUInt64LE(BigInt(len));
  json.copy(out, 8);
  out.set(data, 8 + len);
  return out;
}

test('encoded layout matches a hand-checked header and data', () => {
  const a = fromNestedArray([1, 2], 'float32');
  const b = fromNestedArray([-1, 0, 1], 'int8');
  const out = encodeSafetensors({ b, a });
  const json =
    '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I8","shape":[3],"data_offsets":[8,11]}}';
  assert.equal(json.length, 107);
  assert.equal(out.readBigUInt64LE(0), 112n, 'header length is padded to a multiple of 8');
  assert.equal(out.subarray(8, 120).toString('utf8'), `${json}     `);
  assert.deepEqual([...out.subarray(120)], [0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0xff, 0, 1]);
  assert.equal(out.length, 8 + 112 + 11);
});

test('every dtype round-trips through one file, aligned and zero-copy', () => {
  const tensors = new Map(
    DTYPES.map((dtype) => {
      const [a, b, c, d] = SAMPLES[dtype];
      return [`t_${dtype}`, fromNestedArray([[a], [b], [c], [d]], dtype)] as const;
    }),
  );
  const bytes = encodeSafetensors(tensors, { format: 'pt' });
  const back = decodeSafetensors(bytes);
  assert.deepEqual([...back.keys()].sort(), [...tensors.keys()].sort());
  for (const [name, t] of tensors) {
    const got = back.get(name);
    assert.ok(got, name);
    assert.equal(got.dtype, t.dtype);
    assert.deepEqual(got.shape, [4, 1]);
    assert.deepEqual(toNestedArray(got), toNestedArray(t), name);
    assert.equal(got.data.buffer, bytes.buffer, 'a view, not a copy');
    assert.equal((got.data.byteOffset - bytes.byteOffset) % dtypeSize(got.dtype), 0, `${name} is aligned`);
  }
  const header = JSON.parse(bytes.subarray(8, 8 + Number(bytes.readBigUInt64LE(0))).toString());
  assert.deepEqual(header.__metadata__, { format: 'pt' });
});

test('decodes a hand-written file with metadata, a scalar and an empty tensor', () => {
  const data = new Uint8Array(new Float32Array([2.5, 1, 2]).buffer);
  const bytes = file(
    {
      __metadata__: { source: 'hand' },
      s: { dtype: 'F32', shape: [], data_offsets: [0, 4] },
      e: { dtype: 'I64', shape: [0, 3], data_offsets: [4, 4] },
      v: { dtype: 'F32', shape: [2], data_offsets: [4, 12] },
    },
    data,
  );
  const m = decodeSafetensors(bytes);
  assert.deepEqual([...m.keys()], ['s', 'e', 'v']);
  assert.equal(toNestedArray(m.get('s') as never), 2.5);
  assert.deepEqual(m.get('e')?.shape, [0, 3]);
  assert.deepEqual(toNestedArray(m.get('v') as never), [1, 2]);
});

test('encode refuses the reserved name and bad tensors', () => {
  throwsCode(() => encodeSafetensors({ __metadata__: fromNestedArray([1], 'uint8') }), 'BAD_TENSOR', /reserved/);
  throwsCode(
    () => encodeSafetensors({ x: { dtype: 'float32', shape: [2], data: new Uint8Array(4) } }),
    'BYTE_LENGTH_MISMATCH',
  );
});

test('decode errors say what is wrong', () => {
  const eight = new Uint8Array(8);
  const f32 = (offsets: number[], shape = [2]) => ({ dtype: 'F32', shape, data_offsets: offsets });
  throwsCode(() => decodeSafetensors(new Uint8Array(5)), 'BAD_TENSOR', /too short/);
  const long = Buffer.alloc(16);
  long.writeBigUInt64LE(1000n);
  throwsCode(() => decodeSafetensors(long), 'BAD_TENSOR', /header length 1000 runs past the end of the 16-byte file/);
  const huge = Buffer.alloc(16);
  huge.writeBigUInt64LE(2n ** 63n);
  throwsCode(() => decodeSafetensors(huge), 'BAD_TENSOR', /runs past the end/);
  const notJson = Buffer.concat([Buffer.from([8, 0, 0, 0, 0, 0, 0, 0]), Buffer.from('{"a": [}')]);
  throwsCode(() => decodeSafetensors(notJson), 'BAD_TENSOR', /not valid JSON/);
  throwsCode(() => decodeSafetensors(file([1, 2])), 'BAD_TENSOR', /must be a JSON object/);
  throwsCode(() => decodeSafetensors(file({ a: 3 })), 'BAD_TENSOR', /entry "a" is not an object/);
  throwsCode(
    () => decodeSafetensors(file({ a: { dtype: 'F8_E4M3', shape: [1], data_offsets: [0, 1] } }, eight.subarray(0, 1))),
    'BAD_TENSOR',
    /tensor "a" has dtype "F8_E4M3"; supported dtypes are F32, F64, F16, BF16, I8, U8, I16, I32, I64, BOOL/,
  );
  throwsCode(() => decodeSafetensors(file({ a: f32([0, 8], [-2]) }, eight)), 'BAD_TENSOR', /tensor "a": shape\[0\]/);
  throwsCode(() => decodeSafetensors(file({ a: f32([0]) }, eight)), 'BAD_TENSOR', /data_offsets \[begin, end\]/);
  throwsCode(
    () => decodeSafetensors(file({ a: f32([0, 6]) }, eight)),
    'BAD_TENSOR',
    /"a" is float32\[2\] = 8 bytes but its data_offsets \[0, 6\] span 6/,
  );
  throwsCode(
    () => decodeSafetensors(file({ a: f32([0, 8]), b: f32([4, 12]) }, new Uint8Array(12))),
    'BAD_TENSOR',
    /"b" at data_offsets \[4, 12\] overlaps/,
  );
  throwsCode(
    () => decodeSafetensors(file({ a: f32([0, 8]), b: f32([12, 20]) }, new Uint8Array(20))),
    'BAD_TENSOR',
    /"b" .* leaves a gap after byte 8/,
  );
  throwsCode(
    () => decodeSafetensors(file({ a: f32([0, 8]) }, new Uint8Array(12))),
    'BAD_TENSOR',
    /cover 8 bytes but the file holds 12/,
  );
  throwsCode(() => decodeSafetensors(file({ a: f32([0, 8]) }, new Uint8Array(4))), 'BAD_TENSOR', /holds 4/);
});

test('a tensor inside a larger buffer decodes at its own offset', () => {
  const inner = encodeSafetensors({ x: makeTensor('int16', [2], new Uint8Array([1, 0, 2, 0])) });
  const outer = new Uint8Array(inner.length + 3);
  outer.set(inner, 3);
  const got = decodeSafetensors(outer.subarray(3)).get('x');
  assert.ok(got);
  assert.deepEqual(toNestedArray(got), [1, 2]);
});

const ST_SKIP = safetensorsSkip();

const PY_ST = `
import json, numpy as np
from safetensors.numpy import save_file, load_file
values = {
  'float32': [[1.5, -2.25], [3.4028234663852886e38, 0.1]],
  'float64': [[3.141592653589793, -1e300], [5e-324, 0.0]],
  'float16': [[1.0, -2.0], [65504.0, 0.0999755859375]],
  'int8': [[-128, 127], [0, 5]],
  'uint8': [[0, 255], [1, 2]],
  'int16': [[-32768, 32767], [0, -1]],
  'int32': [[-2147483648, 2147483647], [0, 7]],
  'int64': [[-9007199254740991, 9007199254740991], [0, -1]],
  'bool': [[True, False], [True, True]],
}
save_file({k: np.array(v, dtype=k) for k, v in values.items()}, 'py.safetensors', metadata={'format': 'np'})
back = {k: {'dtype': str(a.dtype), 'shape': list(a.shape), 'values': a.tolist()} for k, a in load_file('ts.safetensors').items()}
expect = {k: np.array(v, dtype=k).tolist() for k, v in values.items()}
print(json.dumps({'expect': expect, 'back': back}))
`;

test('the reference safetensors package reads what we write, and we read what it writes', { skip: ST_SKIP }, () => {
  withTempDir((dir) => {
    const ours = new Map(
      DTYPES.filter((d) => d !== 'bfloat16').map((dtype) => {
        const [a, b, c, d] = SAMPLES[dtype];
        return [
          dtype,
          fromNestedArray(
            [
              [a, b],
              [c, d],
            ],
            dtype,
          ),
        ] as const;
      }),
    );
    writeFileSync(join(dir, 'ts.safetensors'), encodeSafetensors(ours, { format: 'np' }));
    const out = JSON.parse(runPython(PY_ST, dir)) as {
      expect: Record<string, unknown>;
      back: Record<string, { dtype: string; shape: number[]; values: unknown }>;
    };
    for (const [dtype, t] of ours) {
      assert.deepEqual(out.back[dtype], { dtype, shape: [2, 2], values: toNestedArray(t) }, dtype);
    }
    const theirs = decodeSafetensors(readFileSync(join(dir, 'py.safetensors')));
    assert.equal(theirs.size, ours.size);
    for (const [dtype, t] of theirs) {
      assert.equal(t.dtype, dtype);
      assert.deepEqual(toNestedArray(t), out.expect[dtype], dtype);
    }
  });
});
