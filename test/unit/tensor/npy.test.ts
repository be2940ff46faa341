import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { DTYPES, type DType } from '../../../src/tensor/dtype.js';
import { fromNestedArray, toNestedArray } from '../../../src/tensor/nested.js';
import { decodeNpy, encodeNpy, encodeNpyHeader, encodeNpyParts } from '../../../src/tensor/npy.js';
import { makeTensor } from '../../../src/tensor/tensor.js';
import { SAMPLES, throwsCode } from './helpers.js';
import { numpySkip, runPython, withTempDir } from './python.js';

const NUMPY_SKIP = numpySkip();

const NPY_DTYPES = DTYPES.filter((d) => d !== 'bfloat16');

/** A hand-built .npy file: version 1.0 with the given header dict and data bytes. */
function npyFile(dict: string, data: Uint8Array = new Uint8Array(0), version = 1): Buffer {
  const prefix = version === 1 ? 10 : 12;
  const header = Buffer.from(`${dict}\n`, 'latin1');
  const out = Buffer.alloc(prefix + header.length + data.length);
  out.write('\x93NUMPY', 0, 'latin1');
  out[6] = version;
  if (version === 1) out.writeUInt16LE(header.length, 8);
  else out.writeUInt32LE(header.length, 8);
  header.copy(out, prefix);
  out.set(data, prefix + header.length);
  return out;
}

test('the header is the one numpy writes, padded so data starts at a multiple of 64', () => {
  const h = encodeNpyHeader('float32', [2, 3]);
  assert.equal(h.length % 64, 0);
  assert.equal(h.subarray(0, 8).toString('latin1'), '\x93NUMPY\x01\x00');
  assert.equal(h.readUInt16LE(8), h.length - 10);
  const text = h.subarray(10).toString('latin1');
  assert.match(text, /^\{'descr': '<f4', 'fortran_order': False, 'shape': \(2, 3\), \} *\n$/);
  assert.match(encodeNpyHeader('bool', [5]).toString('latin1'), /'descr': '\|b1'.*'shape': \(5,\), \}/);
  assert.match(encodeNpyHeader('int64', []).toString('latin1'), /'descr': '<i8'.*'shape': \(\), \}/);
});

test('every numpy dtype round-trips through encodeNpy/decodeNpy, zero-copy on decode', () => {
  for (const dtype of NPY_DTYPES) {
    const [a, b, c, d] = SAMPLES[dtype];
    const t = fromNestedArray([[a, b, c, d]], dtype);
    const file = encodeNpy(t);
    const back = decodeNpy(file);
    assert.equal(back.dtype, dtype);
    assert.deepEqual(back.shape, [1, 4]);
    assert.deepEqual(toNestedArray(back), [[a, b, c, d]], dtype);
    assert.equal(back.data.buffer, file.buffer, 'decode returns a view, not a copy');
    assert.equal(back.data.byteOffset - file.byteOffset, encodeNpyHeader(dtype, [1, 4]).length);
  }
});

test('encodeNpyParts hands back the header and the tensor bytes themselves', () => {
  const t = fromNestedArray([1, 2, 3], 'int16');
  const [header, data] = encodeNpyParts(t);
  assert.equal(data, t.data);
  assert.deepEqual(Buffer.concat([header, data]), encodeNpy(t));
});

test('the widest shape accepted still fits a version 1.0 header; deeper files are refused', () => {
  const widest = encodeNpyHeader('float64', new Array(32).fill(Number.MAX_SAFE_INTEGER));
  assert.equal(widest[6], 1);
  assert.equal(widest.length % 64, 0);
  assert.ok(widest.length < 0xffff);
  const deep = `{'descr': '|u1', 'fortran_order': False, 'shape': (${new Array(25000).fill(1).join(', ')}), }`;
  throwsCode(() => decodeNpy(npyFile(deep, new Uint8Array([42]), 2)), 'BAD_TENSOR', /at most 32/);
});

test('a version 2.0 file (4-byte header length) decodes', () => {
  const v2 = decodeNpy(npyFile("{'descr': '|u1', 'fortran_order': False, 'shape': (1,), }", new Uint8Array([42]), 2));
  assert.deepEqual([...v2.data], [42]);
});

test('bfloat16 cannot be written as .npy, and the error says what to do instead', () => {
  const t = fromNestedArray([1], 'bfloat16');
  throwsCode(() => encodeNpy(t), 'BAD_TENSOR', /numpy has no bfloat16 dtype/, /safetensors/);
});

test('hand-built files: versions 1.0 and 3.0, scalars, empty arrays', () => {
  const f = new Float32Array([1, 2]);
  const data = new Uint8Array(f.buffer);
  const v1 = decodeNpy(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data));
  assert.deepEqual(toNestedArray(v1), [1, 2]);
  const v3 = decodeNpy(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, 3));
  assert.deepEqual(toNestedArray(v3), [1, 2]);
  const scalar = decodeNpy(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data.subarray(0, 4)));
  assert.deepEqual(scalar.shape, []);
  const empty = decodeNpy(npyFile("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 3), }"));
  assert.deepEqual(empty.shape, [0, 3]);
});

test('decode errors say what is wrong and how to fix it', () => {
  const ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const eight = new Uint8Array(8);
  throwsCode(() => decodeNpy(Buffer.from('PK\x03\x04 not numpy')), 'BAD_TENSOR', /not a \.npy file/, /numpy\.save/);
  throwsCode(() => decodeNpy(new Uint8Array(3)), 'BAD_TENSOR', /not a \.npy file/);
  throwsCode(() => decodeNpy(npyFile(ok, eight, 4)), 'BAD_TENSOR', /format version 4\.0 is not supported/);
  throwsCode(() => decodeNpy(npyFile(ok).subarray(0, 30)), 'BAD_TENSOR', /truncated/);
  throwsCode(
    () => decodeNpy(npyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", eight)),
    'BAD_TENSOR',
    /big-endian/,
    /newbyteorder\('<'\)/,
  );
  throwsCode(
    () => decodeNpy(npyFile("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", eight)),
    'BAD_TENSOR',
    /object arrays .* never loaded/,
  );
  throwsCode(
    () => decodeNpy(npyFile("{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }", eight)),
    'BAD_TENSOR',
    /dtype <u2 is not supported; use one of <f4, <f8, <f2, \|i1, \|u1, <i2, <i4, <i8, \|b1/,
  );
  throwsCode(
    () => decodeNpy(npyFile("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", eight)),
    'BAD_TENSOR',
    /structured/,
  );
  throwsCode(
    () => decodeNpy(npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", eight)),
    'BAD_TENSOR',
    /Fortran \(column-major\)/,
    /ascontiguousarray/,
  );
  throwsCode(() => decodeNpy(npyFile("{'descr': '<f4', 'fortran_order': False, }", eight)), 'BAD_TENSOR', /'shape'/);
  throwsCode(
    () => decodeNpy(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", eight)),
    'BAD_TENSOR',
    /non-integer dimension "-2"/,
  );
  throwsCode(
    () => decodeNpy(npyFile(ok, new Uint8Array(6))),
    'BAD_TENSOR',
    /float32\[2\] needs 8 data bytes but the file holds 6; the file is truncated/,
  );
  throwsCode(() => decodeNpy(npyFile(ok, new Uint8Array(9))), 'BAD_TENSOR', /holds 9; the file has trailing bytes/);
});

const PY_WRITE = `
import numpy as np, json
rows = {
  'float32': [[1.5, -2.25, 3.4028234663852886e38], [1.401298464324817e-45, 0.1, -0.0]],
  'float64': [[3.141592653589793, -1e300, 5e-324], [0.1, 2.0, -3.0]],
  'float16': [[1.0, -2.0, 65504.0], [5.960464477539063e-08, 0.0999755859375, 0.5]],
  'int8': [[-128, 127, 0], [1, 2, 3]],
  'uint8': [[0, 255, 1], [2, 3, 4]],
  'int16': [[-32768, 32767, 0], [1, -1, 2]],
  'int32': [[-2147483648, 2147483647, 0], [1, -1, 2]],
  'int64': [[-9007199254740991, 9007199254740991, 0], [1, -1, 2]],
  'bool': [[True, False, True], [False, False, True]],
}
expect = {}
for name, v in rows.items():
  a = np.array(v, dtype=name)
  np.save(name + '.npy', a)
  expect[name] = a.tolist()
with open('v2.npy', 'wb') as f: np.lib.format.write_array(f, np.arange(6, dtype='<i4').reshape(2, 3), version=(2, 0))
with open('v3.npy', 'wb') as f: np.lib.format.write_array(f, np.arange(6, dtype='<f8').reshape(3, 2), version=(3, 0))
np.save('scalar.npy', np.float32(2.5))
np.save('empty.npy', np.zeros((0, 4), dtype=np.int16))
np.save('fortran.npy', np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save('bigendian.npy', np.arange(3, dtype='>f4'))
np.save('object.npy', np.array([{'a': 1}], dtype=object), allow_pickle=True)
np.save('uint16.npy', np.arange(3, dtype=np.uint16))
print(json.dumps(expect))
`;

test('files written by numpy decode to the same values', { skip: NUMPY_SKIP }, () => {
  withTempDir((dir) => {
    const expect = JSON.parse(runPython(PY_WRITE, dir)) as Record<string, unknown>;
    for (const dtype of NPY_DTYPES) {
      const t = decodeNpy(readFileSync(join(dir, `${dtype}.npy`)));
      assert.equal(t.dtype, dtype);
      assert.deepEqual(t.shape, [2, 3]);
      assert.deepEqual(toNestedArray(t), expect[dtype], dtype);
    }
    const v2 = decodeNpy(readFileSync(join(dir, 'v2.npy')));
    assert.deepEqual(
      [v2.dtype, toNestedArray(v2)],
      [
        'int32',
        [
          [0, 1, 2],
          [3, 4, 5],
        ],
      ],
    );
    const v3 = decodeNpy(readFileSync(join(dir, 'v3.npy')));
    assert.deepEqual(
      [v3.dtype, toNestedArray(v3)],
      [
        'float64',
        [
          [0, 1],
          [2, 3],
          [4, 5],
        ],
      ],
    );
    const scalar = decodeNpy(readFileSync(join(dir, 'scalar.npy')));
    assert.deepEqual([scalar.shape, toNestedArray(scalar)], [[], 2.5]);
    assert.deepEqual(decodeNpy(readFileSync(join(dir, 'empty.npy'))).shape, [0, 4]);
    throwsCode(() => decodeNpy(readFileSync(join(dir, 'fortran.npy'))), 'BAD_TENSOR', /Fortran/);
    throwsCode(() => decodeNpy(readFileSync(join(dir, 'bigendian.npy'))), 'BAD_TENSOR', /big-endian/);
    throwsCode(() => decodeNpy(readFileSync(join(dir, 'object.npy'))), 'BAD_TENSOR', /object arrays/);
    throwsCode(() => decodeNpy(readFileSync(join(dir, 'uint16.npy'))), 'BAD_TENSOR', /<u2 is not supported/);
  });
});

const PY_READ = `
import numpy as np, json, sys
out = {}
for name in sys.argv[1:]:
  with open(name + '.npy', 'rb') as f:
    version = np.lib.format.read_magic(f)
    (np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0)(f)
    offset = f.tell()
  a = np.load(name + '.npy', allow_pickle=False)
  out[name] = {'dtype': str(a.dtype), 'shape': list(a.shape), 'values': a.tolist(), 'offset': offset}
print(json.dumps(out))
`;

test('numpy loads what encodeNpy writes', { skip: NUMPY_SKIP }, () => {
  withTempDir((dir) => {
    const written: Record<string, { dtype: DType; value: unknown }> = {};
    for (const dtype of NPY_DTYPES) {
      const [a, b, c, d] = SAMPLES[dtype];
      const value = [
        [a, b],
        [c, d],
        [d, a],
      ];
      writeFileSync(join(dir, `${dtype}.npy`), encodeNpy(fromNestedArray(value, dtype)));
      written[dtype] = { dtype, value };
    }
    writeFileSync(join(dir, 'scalar.npy'), encodeNpy(fromNestedArray(-7, 'int32')));
    writeFileSync(join(dir, 'empty.npy'), encodeNpy(makeTensor('float32', [0, 5], new Uint8Array(0))));
    const names = [...Object.keys(written), 'scalar', 'empty'];
    const code = `import sys; sys.argv = ['x', ${names.map((n) => `'${n}'`).join(', ')}]\n${PY_READ}`;
    const got = JSON.parse(runPython(code, dir)) as Record<
      string,
      { dtype: string; shape: number[]; values: unknown; offset: number }
    >;
    for (const [name, { dtype, value }] of Object.entries(written)) {
      const g = got[name];
      assert.ok(g, name);
      assert.equal(g.dtype, dtype);
      assert.deepEqual(g.shape, [3, 2]);
      assert.deepEqual(g.values, value, dtype);
      assert.equal(g.offset % 64, 0, 'numpy finds the data at a multiple of 64');
    }
    assert.deepEqual([got.scalar?.dtype, got.scalar?.shape, got.scalar?.values], ['int32', [], -7]);
    assert.deepEqual([got.empty?.dtype, got.empty?.shape, got.empty?.values], ['float32', [0, 5], []]);
  });
});
