import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseModelConfig } from '../../../src/registry/model-config.js';
import { decodeInputs } from '../../../src/requests/decode-inputs.js';
import { parseParameters } from '../../../src/requests/parameters.js';
import { encodeNpy } from '../../../src/tensor/npy.js';
import { TensorStore } from '../../../src/tensor/store.js';
import { toNumbers } from '../../../src/tensor/tensor.js';

const cfg = parseModelConfig(
  {
    name: 'demo',
    inputs: [{ name: 'x', dtype: 'float32', shape: [-1, 2] }],
    outputs: [{ name: 'y', dtype: 'float32', shape: [-1] }],
    parameters: { precision: ['bf16'] },
    versions: { '1': { format: 'torchscript', file: 'm.pt' } },
  },
  'test',
);
const root = mkdtempSync(join(tmpdir(), 'tg-dec-'));
const outside = mkdtempSync(join(tmpdir(), 'tg-out-'));
const ctx = {
  config: { allowedRoots: [root], maxArrayElements: 100, maxInputBytes: 1 << 20 },
  store: new TensorStore(1 << 20, 60_000),
};
const npy = (values: number[], shape: number[]) =>
  encodeNpy({ dtype: 'float32', shape, data: new Uint8Array(new Float32Array(values).buffer) });

test('decodes a nested array, adding a missing dynamic batch dimension', () => {
  const [x] = decodeInputs(cfg.inputs, { x: [1.5, 2.5] }, ctx);
  assert.deepEqual(x?.tensor.shape, [1, 2]);
  assert.equal(x?.form, 'array');
  assert.deepEqual([...toNumbers(x?.tensor as never)], [1.5, 2.5]);
});

test('reads .npy files under an allowed root, and refuses symlinks that lead outside', () => {
  writeFileSync(join(root, 'x.npy'), npy([1, 2, 3, 4], [2, 2]));
  const [x] = decodeInputs(cfg.inputs, { x: { path: join(root, 'x.npy') } }, ctx);
  assert.deepEqual(x?.tensor.shape, [2, 2]);
  writeFileSync(join(outside, 'secret.npy'), npy([1, 2], [1, 2]));
  mkdirSync(join(root, 'sub'), { recursive: true });
  symlinkSync(join(outside, 'secret.npy'), join(root, 'sub', 'link.npy'));
  assert.throws(() => decodeInputs(cfg.inputs, { x: join(root, 'sub', 'link.npy') }, ctx), {
    code: 'PATH_NOT_ALLOWED',
  });
  assert.throws(() => decodeInputs(cfg.inputs, { x: { path: 'relative.npy' } }, ctx), { code: 'PATH_NOT_ALLOWED' });
  writeFileSync(join(root, 'x.txt'), 'hello');
  assert.throws(() => decodeInputs(cfg.inputs, { x: { path: join(root, 'x.txt') } }, ctx), { code: 'BAD_TENSOR' });
});

test('a root that is a symlink keeps the target it had when first used: re-pointing it widens nothing', () => {
  const first = mkdtempSync(join(tmpdir(), 'tg-first-'));
  const second = mkdtempSync(join(tmpdir(), 'tg-second-'));
  const link = join(mkdtempSync(join(tmpdir(), 'tg-link-')), 'root');
  symlinkSync(first, link);
  const linked = { ...ctx, config: { ...ctx.config, allowedRoots: [link] } };
  writeFileSync(join(first, 'a.npy'), npy([1, 2], [1, 2]));
  writeFileSync(join(second, 'b.npy'), npy([3, 4], [1, 2]));
  assert.deepEqual(decodeInputs(cfg.inputs, { x: { path: join(link, 'a.npy') } }, linked)[0]?.tensor.shape, [1, 2]);
  rmSync(link);
  symlinkSync(second, link);
  // The file is found through the new link, but its real path lies outside the root as first resolved.
  assert.throws(() => decodeInputs(cfg.inputs, { x: { path: join(link, 'b.npy') } }, linked), {
    code: 'PATH_NOT_ALLOWED',
  });
  assert.deepEqual(decodeInputs(cfg.inputs, { x: { path: join(first, 'a.npy') } }, linked)[0]?.tensor.shape, [1, 2]);
});

test('a root missing at first use is looked up again once it exists', () => {
  const later = join(mkdtempSync(join(tmpdir(), 'tg-later-')), 'models');
  const target = mkdtempSync(join(tmpdir(), 'tg-target-'));
  const linked = { ...ctx, config: { ...ctx.config, allowedRoots: [later] } };
  assert.throws(() => decodeInputs(cfg.inputs, { x: { path: join(later, 'a.npy') } }, linked), {
    code: 'FILE_NOT_FOUND',
  });
  symlinkSync(target, later);
  writeFileSync(join(target, 'a.npy'), npy([1, 2], [1, 2]));
  assert.deepEqual(decodeInputs(cfg.inputs, { x: { path: join(later, 'a.npy') } }, linked)[0]?.tensor.shape, [1, 2]);
});

test('bad forms, oversize arrays and unknown names are refused with their codes', () => {
  assert.throws(() => decodeInputs(cfg.inputs, { x: { weird: true } }, ctx), /unrecognised form/);
  assert.throws(() => decodeInputs(cfg.inputs, { x: Array.from({ length: 60 }, () => [1, 2]) }, ctx), {
    code: 'INPUT_TOO_LARGE',
  });
  assert.throws(() => decodeInputs(cfg.inputs, { x: [[1, 2]], z: [1] }, ctx), { code: 'UNKNOWN_INPUT' });
  assert.throws(() => decodeInputs(cfg.inputs, { x: { b64: 'AAAAAAAAAAA=', shape: [1, 2], dtype: 'int64' } }, ctx), {
    code: 'BYTE_LENGTH_MISMATCH',
  });
  assert.throws(() => decodeInputs(cfg.inputs, { x: { b64: 'AAAAAAAAAAA=', shape: [1, 2], dtype: 'int32' } }, ctx), {
    code: 'DTYPE_MISMATCH',
  });
});

test('parameters are checked against what the model offers', () => {
  assert.deepEqual(parseParameters(undefined, cfg), {
    precision: 'fp32',
    top_k: 5,
    threshold: undefined,
    timeout_ms: undefined,
    engine: undefined,
  });
  assert.deepEqual(parseParameters({ precision: 'bf16', top_k: 2, timeout_ms: 50, engine: 'onnx' }, cfg), {
    precision: 'bf16',
    top_k: 2,
    threshold: undefined,
    timeout_ms: 50,
    engine: 'onnx',
  });
  assert.throws(() => parseParameters({ engine: 'tensorrt' }, cfg), /engine must be one of torch, onnx, remote/);
  assert.throws(() => parseParameters({ timeout_ms: 0 }, cfg), /timeout_ms/);
  assert.throws(() => parseParameters({ precision: 'fp16' }, cfg), /offers fp32, bf16/);
  assert.throws(() => parseParameters({ top_k: 0 }, cfg), { code: 'BAD_PARAMETER' });
  assert.throws(() => parseParameters({ batch: 4 }, cfg), /unknown parameter "batch"/);
  assert.equal(parseParameters({ threshold: 0.25 }, cfg).threshold, 0.25);
  assert.throws(() => parseParameters({ threshold: 2 }, cfg), /threshold must be a number from 0 to 1/);
});
