import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { inflateSync } from 'node:zlib';
import { formatNumber, type PlotSeries, renderCurvesPng } from '../../../src/training/plot-png.js';

const SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

function crc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

interface Decoded {
  width: number;
  height: number;
  chunks: string[];
  /** The colour at (x, y), from the unfiltered scanlines. */
  at(x: number, y: number): [number, number, number];
}

/** Parses the PNG by hand and checks its structure along the way. */
function decode(png: Buffer): Decoded {
  assert.deepEqual([...png.subarray(0, 8)], SIGNATURE);
  const chunks: string[] = [];
  const idat: Buffer[] = [];
  let header: Buffer | undefined;
  let pos = 8;
  while (pos < png.length) {
    const length = png.readUInt32BE(pos);
    const type = png.toString('latin1', pos + 4, pos + 8);
    const body = png.subarray(pos + 8, pos + 8 + length);
    assert.equal(png.readUInt32BE(pos + 8 + length), crc32(png.subarray(pos + 4, pos + 8 + length)), `${type} CRC`);
    chunks.push(type);
    if (type === 'IHDR') header = body;
    if (type === 'IDAT') idat.push(body);
    pos += 12 + length;
  }
  assert.equal(pos, png.length);
  assert.equal(chunks[0], 'IHDR');
  assert.equal(chunks.at(-1), 'IEND');
  assert.ok(idat.length >= 1);
  assert.ok(header);
  const width = header.readUInt32BE(0);
  const height = header.readUInt32BE(4);
  assert.equal(header[8], 8, 'bit depth');
  assert.ok(header[9] === 2 || header[9] === 6, 'colour type RGB or RGBA');
  const channels = header[9] === 2 ? 3 : 4;
  const raw = inflateSync(Buffer.concat(idat));
  const stride = 1 + width * channels;
  assert.equal(raw.length, height * stride);
  for (let y = 0; y < height; y++) assert.equal(raw[y * stride], 0, `filter byte of row ${y}`);
  const at = (x: number, y: number): [number, number, number] => {
    const i = y * stride + 1 + x * channels;
    return [raw[i] as number, raw[i + 1] as number, raw[i + 2] as number];
  };
  return { width, height, chunks, at };
}

const isColoured = ([r, g, b]: [number, number, number]): boolean => !(r === g && g === b);

/** The distinct non-grey colours in a region given as fractions of the image. */
function coloursIn(img: Decoded, fx0: number, fx1: number, fy0: number, fy1: number): Set<string> {
  const found = new Set<string>();
  for (let y = Math.floor(fy0 * img.height); y < Math.ceil(fy1 * img.height); y++)
    for (let x = Math.floor(fx0 * img.width); x < Math.ceil(fx1 * img.width); x++) {
      const c = img.at(x, y);
      if (isColoured(c)) found.add(c.join(','));
    }
  return found;
}

const rising = (n = 50): PlotSeries => ({
  name: 'accuracy',
  steps: Array.from({ length: n }, (_, i) => i * 100),
  values: Array.from({ length: n }, (_, i) => i / (n - 1)),
});

describe('renderCurvesPng', () => {
  it('writes a valid 8-bit PNG of the default size for one series', () => {
    const img = decode(renderCurvesPng([rising()], { title: 'run-1 (step 4900)' }));
    assert.equal(img.width, 640);
    assert.equal(img.height, 170 + 40);
    assert.deepEqual(
      img.chunks.filter((c) => c !== 'IDAT'),
      ['IHDR', 'IEND'],
    );
  });

  it('draws a rising series from the bottom left to the top right of its plot area', () => {
    const img = decode(renderCurvesPng([rising()]));
    assert.ok(coloursIn(img, 0.1, 0.25, 0.6, 0.92).size > 0, 'line near the bottom left');
    assert.ok(coloursIn(img, 0.75, 0.99, 0.2, 0.45).size > 0, 'line near the top right');
    assert.equal(coloursIn(img, 0.12, 0.3, 0.25, 0.45).size, 0, 'nothing at the top left');
    assert.equal(coloursIn(img, 0.75, 0.95, 0.65, 0.85).size, 0, 'nothing at the bottom right');
  });

  it('scales x by step, so non-uniform steps bend the line', () => {
    // Half the points sit in the first tenth of the steps: the line is high by a fifth of the width.
    const steps = [...Array.from({ length: 50 }, (_, i) => i), ...Array.from({ length: 50 }, (_, i) => 100 + i * 18)];
    const values = steps.map((_, i) => i);
    const img = decode(renderCurvesPng([{ name: 'x', steps, values }]));
    assert.ok(coloursIn(img, 0.15, 0.22, 0.45, 0.6).size > 0);
  });

  it('renders NaN and infinite values as gaps, and a constant or empty series without throwing', () => {
    const values = [1, 2, Number.NaN, Number.POSITIVE_INFINITY, 3, Number.NEGATIVE_INFINITY, 4, 5];
    const series: PlotSeries[] = [
      { name: 'loss', steps: values.map((_, i) => i), values: Float64Array.from(values) },
      { name: 'lr', steps: [0, 10, 20], values: [3e-4, 3e-4, 3e-4] },
      { name: 'empty', steps: [], values: [] },
      { name: 'all nan', steps: [1, 2], values: [Number.NaN, Number.NaN] },
      { name: 'one point', steps: [7], values: [0.5] },
    ];
    const img = decode(renderCurvesPng(series));
    assert.equal(img.height, 5 * 170 + 40);
    // The constant series is a flat line across the middle of the second panel.
    const middle = Math.round(34 + 170 + (14 + 170 - 16) / 2);
    const row = Array.from(
      { length: img.width },
      (_, x) => isColoured(img.at(x, middle)) || isColoured(img.at(x, middle + 1)),
    );
    assert.ok(row.filter(Boolean).length > img.width * 0.8);
  });

  it('gives each series its own panel and colour, up to six', () => {
    const three = decode(renderCurvesPng([rising(), rising(), rising()]));
    assert.equal(three.height, 3 * 170 + 40);
    const bands = [0, 1, 2].map((i) =>
      coloursIn(three, 0, 1, (34 + i * 170) / three.height, (34 + (i + 1) * 170) / three.height),
    );
    for (const band of bands) assert.ok(band.size > 0);
    const main = bands.map((band) => [...band][0]);
    assert.equal(new Set(main).size, 3);
    assert.equal(decode(renderCurvesPng(Array.from({ length: 9 }, () => rising()))).height, 6 * 170 + 40);
    assert.equal(decode(renderCurvesPng([])).height, 170 + 40);
  });

  it('respects the width and height options within their bounds', () => {
    assert.equal(decode(renderCurvesPng([rising()], { width: 300 })).width, 300);
    assert.equal(decode(renderCurvesPng([rising()], { width: 50 })).width, 200);
    assert.equal(decode(renderCurvesPng([rising()], { width: 5000 })).width, 2000);
    const tall = decode(renderCurvesPng([rising()], { width: 400, height: 500 }));
    assert.deepEqual([tall.width, tall.height], [400, 500]);
    assert.equal(decode(renderCurvesPng([rising()], { height: 9000 })).height, 2000);
  });

  it('draws unknown characters as a box rather than throwing', () => {
    assert.doesNotThrow(() => decode(renderCurvesPng([{ ...rising(), name: 'lösś ✓ \t' }], { title: 'ü' })));
  });
});

describe('formatNumber', () => {
  it('keeps labels compact', () => {
    assert.equal(formatNumber(0.0123), '0.0123');
    assert.equal(formatNumber(0.000012), '1.2e-5');
    assert.equal(formatNumber(3400), '3400');
    assert.equal(formatNumber(2.54321), '2.543');
    assert.equal(formatNumber(-0.5), '-0.5');
    assert.equal(formatNumber(15_000_000), '1.5e7');
    assert.equal(formatNumber(0), '0');
  });
});
