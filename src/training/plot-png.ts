/**
 * Renders a training run's metric curves as a small PNG, for `get_run` to hand an agent as MCP
 * image content. Node has no canvas without a native dependency, and the image only has to let an
 * agent glance at the shape of a curve, so this draws the chart itself: an RGB pixel buffer,
 * Bresenham lines, a 5x7 bitmap font, and a PNG written by src/tensor/png.ts.
 */

import { encodePngRows } from '../tensor/png.js';

export interface PlotSeries {
  name: string;
  steps: ArrayLike<number>;
  values: ArrayLike<number>;
}

export interface PlotOptions {
  title?: string;
  width?: number;
  height?: number;
}

type Rgb = readonly [number, number, number];

const MAX_PANELS = 6;
const PANEL_HEIGHT = 170;
const TOP = 34; // room for the title; TOP + BOTTOM is the 40 px added to the panels' height
const BOTTOM = 6;
const LEFT = 66; // room for the y labels, right-aligned against the plot area
const RIGHT = 12;
const INSET = 3; // keeps the line off the frame

const FRAME: Rgb = [208, 208, 208];
const TEXT: Rgb = [40, 40, 40];
const LABEL: Rgb = [96, 96, 96];
const COLOURS: Rgb[] = [
  [31, 119, 180],
  [255, 127, 14],
  [44, 160, 44],
  [214, 39, 40],
  [148, 103, 189],
  [140, 86, 75],
];

// The classic 5x7 font for ASCII 32..126: five columns per glyph, two hex digits each, bit 0 at the top.
const FONT_HEX =
  '000000000000005f00000007000700147f147f14242a7f2a12231308646236495522500005030000001c2241000041221c00' +
  '14083e081408083e080800503000000808080808006060000020100804023e5149453e00427f400042615149462141454b31' +
  '1814127f1027454545393c4a49493001710905033649494936064949291e0036360000005636000008142241001414141414' +
  '00412214080201510906324979413e7e1111117e7f494949363e414141227f4141221c7f494949417f090909013e4149497a' +
  '7f0808087f00417f41002040413f017f081422417f404040407f020c027f7f0408107f3e4141413e7f090909063e4151215e' +
  '7f09192946464949493101017f01013f4040403f1f2040201f3f4038403f631408146307087008076151494543007f414100' +
  '02040810200041417f0004020102044040404040000102040020545454787f484444383844444420384444487f3854545418' +
  '087e0901020c5252523e7f0804047800447d40002040443d007f1028440000417f40007c041804787c080404783844444438' +
  '7c14141408081414187c7c080404084854545420043f4440203c4040207c1c2040201c3c4030403c44281028440c5050503c' +
  '4464544c44000836410000007f000000413608001008081008';
const FONT = Uint8Array.from(FONT_HEX.match(/../g) ?? [], (hex) => Number.parseInt(hex, 16));
const BOX_GLYPH = [0x7f, 0x41, 0x41, 0x41, 0x7f];

/** An RGB image laid out as PNG scanlines: each row is a filter byte (0) and then the pixels. */
class Canvas {
  readonly stride: number;
  readonly data: Buffer;

  constructor(
    readonly width: number,
    readonly height: number,
  ) {
    this.stride = 1 + width * 3;
    this.data = Buffer.alloc(this.stride * height, 255);
    for (let y = 0; y < height; y++) this.data[y * this.stride] = 0;
  }

  set(x: number, y: number, [r, g, b]: Rgb): void {
    if (x < 0 || y < 0 || x >= this.width || y >= this.height) return;
    const i = y * this.stride + 1 + x * 3;
    this.data[i] = r;
    this.data[i + 1] = g;
    this.data[i + 2] = b;
  }

  fill(x: number, y: number, w: number, h: number, colour: Rgb): void {
    for (let j = y; j < y + h; j++) for (let i = x; i < x + w; i++) this.set(i, j, colour);
  }

  frame(x0: number, y0: number, x1: number, y1: number, colour: Rgb): void {
    this.fill(x0, y0, x1 - x0 + 1, 1, colour);
    this.fill(x0, y1, x1 - x0 + 1, 1, colour);
    this.fill(x0, y0, 1, y1 - y0 + 1, colour);
    this.fill(x1, y0, 1, y1 - y0 + 1, colour);
  }

  /** Bresenham's line with a 2x2 brush. */
  line(fromX: number, fromY: number, toX: number, toY: number, colour: Rgb): void {
    let x = fromX;
    let y = fromY;
    const dx = Math.abs(toX - x);
    const dy = -Math.abs(toY - y);
    const sx = x < toX ? 1 : -1;
    const sy = y < toY ? 1 : -1;
    let err = dx + dy;
    for (;;) {
      this.fill(x, y, 2, 2, colour);
      if (x === toX && y === toY) return;
      const e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y += sy;
      }
    }
  }

  text(s: string, x: number, y: number, colour: Rgb, scale = 1): void {
    for (let k = 0; k < s.length; k++) {
      const code = s.charCodeAt(k);
      const glyph = code >= 32 && code <= 126 ? FONT.subarray((code - 32) * 5, (code - 31) * 5) : BOX_GLYPH;
      glyph.forEach((bits, col) => {
        for (let row = 0; row < 7; row++)
          if (bits & (1 << row)) this.fill(x + (k * 6 + col) * scale, y + row * scale, scale, scale, colour);
      });
    }
  }
}

const textWidth = (s: string, scale = 1): number => Math.max(0, s.length * 6 - 1) * scale;

const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, Math.round(v)));

/** Compact number for a label: 0.0123, 1.2e-5, 3400, 1.5e7. */
export function formatNumber(v: number): string {
  const a = Math.abs(v);
  if (v === 0 || !Number.isFinite(v)) return String(v);
  if (Number.isInteger(v) && a < 1e6) return String(v);
  if (a >= 1e-3 && a < 1e4) return String(Number.parseFloat(v.toPrecision(4)));
  return v
    .toExponential(2)
    .replace(/\.?0+e/, 'e')
    .replace('e+', 'e');
}

interface Point {
  step: number;
  value: number;
}

/** The series' points in order, with null where a non-finite value or step breaks the line. */
function pointsOf(series: PlotSeries): (Point | null)[] {
  const n = Math.min(series.steps.length, series.values.length);
  const points: (Point | null)[] = [];
  for (let i = 0; i < n; i++) {
    const step = Number(series.steps[i]);
    const value = Number(series.values[i]);
    points.push(Number.isFinite(step) && Number.isFinite(value) ? { step, value } : null);
  }
  return points;
}

function extent(numbers: number[]): [number, number] {
  let lo = Number.POSITIVE_INFINITY;
  let hi = Number.NEGATIVE_INFINITY;
  for (const v of numbers) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return [lo, hi];
}

/** Maps v in [lo, hi] onto [from, to]; a zero-width range maps to the middle. */
const scale = (v: number, lo: number, hi: number, from: number, to: number): number =>
  Math.round(hi > lo ? from + ((v - lo) / (hi - lo)) * (to - from) : (from + to) / 2);

function drawPanel(canvas: Canvas, series: PlotSeries, top: number, height: number, colour: Rgb): void {
  const [x0, x1] = [LEFT, canvas.width - RIGHT];
  const [y0, y1] = [top + 14, top + height - 16];
  const points = pointsOf(series);
  const finite = points.filter((p): p is Point => p !== null);
  const last = finite[finite.length - 1];
  canvas.text(last ? `${series.name}  last ${formatNumber(last.value)}` : series.name, 8, top + 2, TEXT);
  canvas.frame(x0, y0, x1, y1, FRAME);
  if (!last) {
    canvas.text('no data', Math.round((x0 + x1 - textWidth('no data')) / 2), Math.round((y0 + y1) / 2) - 3, LABEL);
    return;
  }
  const [sLo, sHi] = extent(finite.map((p) => p.step));
  const [vLo, vHi] = extent(finite.map((p) => p.value));
  const maxLabel = formatNumber(vHi);
  const minLabel = formatNumber(vLo);
  canvas.text(maxLabel, x0 - 4 - textWidth(maxLabel), y0, LABEL);
  if (vHi > vLo) canvas.text(minLabel, x0 - 4 - textWidth(minLabel), y1 - 6, LABEL);
  canvas.text(formatNumber(sLo), x0, y1 + 4, LABEL);
  if (sHi > sLo) canvas.text(formatNumber(sHi), x1 - textWidth(formatNumber(sHi)), y1 + 4, LABEL);

  let prev: [number, number] | null = null;
  for (const p of points) {
    if (!p) {
      prev = null;
      continue;
    }
    const x = scale(p.step, sLo, sHi, x0 + INSET, x1 - INSET - 1);
    const y = scale(p.value, vLo, vHi, y1 - INSET - 1, y0 + INSET);
    canvas.line(prev?.[0] ?? x, prev?.[1] ?? y, x, y, colour);
    prev = [x, y];
  }
}

function encodePng(canvas: Canvas): Buffer {
  // The canvas keeps its rows as PNG lays them out (a filter byte, then RGB): no copy to encode.
  return encodePngRows(canvas.data, canvas.width, canvas.height, 3);
}

/**
 * One panel per series (each on its own scale), stacked, at most six; a series with no finite
 * points gets a "no data" panel, and no series at all gives one empty panel.
 */
export function renderCurvesPng(series: PlotSeries[], options: PlotOptions = {}): Buffer {
  const shown = series.slice(0, MAX_PANELS);
  const panels = Math.max(1, shown.length);
  const width = clamp(Number.isFinite(options.width) ? (options.width as number) : 640, 200, 2000);
  const wanted = Number.isFinite(options.height) ? (options.height as number) : PANEL_HEIGHT * panels + TOP + BOTTOM;
  const height = clamp(wanted, 60 * panels + TOP + BOTTOM, 2000);
  const canvas = new Canvas(width, height);
  if (options.title) {
    const big = textWidth(options.title, 2) <= width - 16;
    canvas.text(options.title, 8, big ? 10 : 14, TEXT, big ? 2 : 1);
  }
  const panelHeight = Math.floor((height - TOP - BOTTOM) / panels);
  const list = shown.length ? shown : [{ name: '(no metrics)', steps: [], values: [] }];
  list.forEach((s, i) => {
    drawPanel(canvas, s, TOP + i * panelHeight, panelHeight, COLOURS[i % COLOURS.length] as Rgb);
  });
  return encodePng(canvas);
}
