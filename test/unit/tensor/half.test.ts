import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  bfloat16BitsToFloat,
  bfloat16Values,
  float16Values,
  floatToBfloat16Bits,
  floatToHalfBits,
  halfBitsToFloat,
} from '../../../src/tensor/half.js';
import { numpySkip, runPython, torchSkip, withTempDir } from './python.js';

const NUMPY_SKIP = numpySkip();
const TORCH_SKIP = torchSkip();

const HALF: [number, number][] = [
  [0x0000, 0],
  [0x3c00, 1],
  [0xc000, -2],
  [0x7bff, 65504],
  [0xfbff, -65504],
  [0x0001, 2 ** -24],
  [0x03ff, 1023 * 2 ** -24],
  [0x0400, 2 ** -14],
  [0x3555, 0.333251953125],
  [0x7c00, Number.POSITIVE_INFINITY],
  [0xfc00, Number.NEGATIVE_INFINITY],
];

const BF16: [number, number][] = [
  [0x0000, 0],
  [0x3f80, 1],
  [0xc000, -2],
  [0x4049, 3.140625],
  [0x7f7f, 3.3895313892515355e38],
  [0x0001, 2 ** -133],
  [0x0080, 2 ** -126],
  [0x7f80, Number.POSITIVE_INFINITY],
  [0xff80, Number.NEGATIVE_INFINITY],
];

test('float16 bits decode to known values and encode back', () => {
  for (const [bits, value] of HALF) {
    assert.equal(halfBitsToFloat(bits), value, `0x${bits.toString(16)}`);
    assert.equal(floatToHalfBits(value), bits, `${value}`);
  }
  assert.ok(Number.isNaN(halfBitsToFloat(0x7e00)));
  assert.ok(Number.isNaN(halfBitsToFloat(0xfc01)));
  assert.equal(floatToHalfBits(Number.NaN), 0x7e00);
  assert.ok(Object.is(halfBitsToFloat(0x8000), -0));
  assert.equal(floatToHalfBits(-0), 0x8000);
});

test('float16 encoding rounds to nearest, ties to even, and overflows to infinity', () => {
  assert.equal(floatToHalfBits(1 / 3), 0x3555);
  assert.equal(floatToHalfBits(0.1), 0x2e66);
  assert.equal(floatToHalfBits(1 + 2 ** -11), 0x3c00, 'tie rounds down to even');
  assert.equal(floatToHalfBits(1 + 3 * 2 ** -11), 0x3c02, 'tie rounds up to even');
  assert.equal(floatToHalfBits(65519), 0x7bff);
  assert.equal(floatToHalfBits(65520), 0x7c00);
  assert.equal(floatToHalfBits(1e10), 0x7c00);
  assert.equal(floatToHalfBits(2 ** -25), 0x0000, 'half of the smallest subnormal ties to zero');
  assert.equal(floatToHalfBits(3 * 2 ** -25), 0x0002);
  assert.equal(floatToHalfBits(2 ** -14 - 2 ** -25), 0x0400, 'rounds up from subnormal to the smallest normal');
  assert.equal(floatToHalfBits(5e-324), 0x0000);
  assert.equal(floatToHalfBits(2047.5), 0x6800, '2047.5 ties up to 2048 (even)');
});

test('bfloat16 bits decode to known values and encode back', () => {
  for (const [bits, value] of BF16) {
    assert.equal(bfloat16BitsToFloat(bits), value, `0x${bits.toString(16)}`);
    assert.equal(floatToBfloat16Bits(value), bits, `${value}`);
  }
  assert.ok(Number.isNaN(bfloat16BitsToFloat(0x7fc0)));
  assert.equal(floatToBfloat16Bits(Number.NaN), 0x7fc0);
  assert.equal(floatToBfloat16Bits(Math.PI), 0x4049);
  assert.equal(floatToBfloat16Bits(0.1), 0x3dcd);
  assert.equal(floatToBfloat16Bits(1 + 2 ** -8), 0x3f80, 'tie rounds down to even');
  assert.equal(floatToBfloat16Bits(1 + 3 * 2 ** -8), 0x3f82, 'tie rounds up to even');
  assert.equal(floatToBfloat16Bits(3.4e38), 0x7f80, 'past the largest bfloat16 is infinity');
});

test('lookup tables agree with the scalar decoders', () => {
  const h = float16Values();
  const b = bfloat16Values();
  assert.equal(h.length, 65536);
  for (let i = 0; i < 65536; i++) {
    assert.ok(Object.is(h[i], halfBitsToFloat(i)) || (Number.isNaN(h[i]) && Number.isNaN(halfBitsToFloat(i))));
    const v = bfloat16BitsToFloat(i);
    assert.ok(Object.is(b[i], v) || (Number.isNaN(b[i]) && Number.isNaN(v)));
  }
});

test('float16 matches numpy: all 65536 bit patterns decode, and 20000 doubles encode', { skip: NUMPY_SKIP }, () => {
  withTempDir((dir) => {
    const inputs = new Float64Array(20000);
    for (let i = 0; i < inputs.length; i++) {
      const mag = 2 ** (Math.random() * 40 - 28);
      inputs[i] = (Math.random() < 0.5 ? -1 : 1) * mag * (1 + Math.random());
    }
    // Exact ties and near-ties around the rounding points, where double rounding would go wrong.
    for (let i = 0; i < 2000; i++) inputs[i] = (1 + (2 * i + 1) * 2 ** -11) * 2 ** ((i % 30) - 15);
    writeFileSync(join(dir, 'in.bin'), inputs);
    runPython(
      `import numpy as np
bits = np.arange(65536, dtype=np.uint16)
bits.view(np.float16).astype(np.float64).tofile('decoded.bin')
x = np.fromfile('in.bin', dtype=np.float64)
x.astype(np.float16).view(np.uint16).tofile('encoded.bin')`,
      dir,
    );
    const dec = readFileSync(join(dir, 'decoded.bin'));
    const decoded = new Float64Array(dec.buffer.slice(dec.byteOffset, dec.byteOffset + dec.byteLength));
    const table = float16Values();
    for (let i = 0; i < 65536; i++) {
      const ok = Object.is(table[i], decoded[i]) || (Number.isNaN(table[i]) && Number.isNaN(decoded[i]));
      if (!ok) assert.fail(`bits 0x${i.toString(16)}: ours ${table[i]}, numpy ${decoded[i]}`);
    }
    const encodedFile = readFileSync(join(dir, 'encoded.bin'));
    const encoded = new Uint16Array(encodedFile.buffer, encodedFile.byteOffset, inputs.length);
    for (let i = 0; i < inputs.length; i++) {
      if (floatToHalfBits(inputs[i] as number) !== encoded[i]) {
        assert.fail(
          `${inputs[i]}: ours 0x${floatToHalfBits(inputs[i] as number).toString(16)}, numpy 0x${encoded[i]?.toString(16)}`,
        );
      }
    }
  });
});

test('bfloat16 matches torch for 20000 float32 values', { skip: TORCH_SKIP }, () => {
  withTempDir((dir) => {
    const inputs = new Float32Array(20000);
    for (let i = 0; i < inputs.length; i++) {
      inputs[i] = (Math.random() < 0.5 ? -1 : 1) * 2 ** (Math.random() * 260 - 130) * (1 + Math.random());
    }
    for (let i = 0; i < 2000; i++) inputs[i] = (1 + (2 * i + 1) * 2 ** -8) * 2 ** ((i % 200) - 100);
    writeFileSync(join(dir, 'in.bin'), inputs);
    runPython(
      `import numpy as np, torch
x = torch.from_numpy(np.fromfile('in.bin', dtype=np.float32))
x.to(torch.bfloat16).view(torch.int16).numpy().tofile('encoded.bin')
b = torch.from_numpy(np.arange(65536, dtype=np.int32).astype(np.uint16).view(np.int16)).view(torch.bfloat16)
b.to(torch.float64).numpy().tofile('decoded.bin')`,
      dir,
    );
    const enc = readFileSync(join(dir, 'encoded.bin'));
    const encoded = new Uint16Array(enc.buffer, enc.byteOffset, inputs.length);
    for (let i = 0; i < inputs.length; i++) {
      if (floatToBfloat16Bits(inputs[i] as number) !== encoded[i]) {
        assert.fail(
          `${inputs[i]}: ours 0x${floatToBfloat16Bits(inputs[i] as number).toString(16)}, torch 0x${encoded[i]?.toString(16)}`,
        );
      }
    }
    const dec = readFileSync(join(dir, 'decoded.bin'));
    const decoded = new Float64Array(dec.buffer.slice(dec.byteOffset, dec.byteOffset + dec.byteLength));
    const table = bfloat16Values();
    for (let i = 0; i < 65536; i++) {
      const ok = Object.is(table[i], decoded[i]) || (Number.isNaN(table[i]) && Number.isNaN(decoded[i]));
      if (!ok) assert.fail(`bits 0x${i.toString(16)}: ours ${table[i]}, torch ${decoded[i]}`);
    }
  });
});
