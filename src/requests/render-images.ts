import type { ImageOutputConfig } from '../registry/processing.js';
import { encodePng } from '../tensor/png.js';
import { numberReader, type Tensor } from '../tensor/tensor.js';

/**
 * Image and mask outputs as PNG files, one per item: what an agent can look at (MCP image
 * content) where a tensor handle would mean nothing to it.
 */
export interface RenderedImage {
  width: number;
  height: number;
  png: Buffer;
  /** Masks: each class's share of the pixels, by label, largest first. */
  coverage?: Record<string, number>;
}

/** [batch, C, H, W] (CHW) or [batch, H, W, C] (HWC) values, scaled and clamped to 0-255. */
export function renderImages(tensor: Tensor, config: ImageOutputConfig): RenderedImage[] {
  const chw = config.layout === 'CHW';
  const [items = 0, a = 0, b = 0, c = 0] = tensor.shape;
  const [channels, height, width] = chw ? [a, b, c] : [c, a, b];
  const read = numberReader(tensor);
  const out: RenderedImage[] = [];
  for (let item = 0; item < items; item++) {
    const pixels = new Uint8Array(height * width * channels);
    const base = item * channels * height * width;
    for (let y = 0; y < height; y++)
      for (let x = 0; x < width; x++)
        for (let ch = 0; ch < channels; ch++) {
          const at = chw ? (ch * height + y) * width + x : (y * width + x) * channels + ch;
          const value = Math.round(read(base + at) * config.scale);
          pixels[(y * width + x) * channels + ch] = Number.isNaN(value) ? 0 : Math.min(255, Math.max(0, value));
        }
    out.push({ width, height, png: encodePng(pixels, width, height, channels as 1 | 3 | 4) });
  }
  return out;
}

/** Distinct colours for classes 1..n; class 0 (background, usually) is black. */
function colour(index: number): [number, number, number] {
  if (index === 0) return [0, 0, 0];
  // Golden-ratio hues: neighbouring classes far apart on the colour wheel.
  const hue = (index * 0.618033988749895) % 1;
  const f = (n: number) => {
    const k = (n + hue * 6) % 6;
    return Math.round(255 * (1 - Math.max(0, Math.min(k, 4 - k, 1)) * 0.85));
  };
  return [f(5), f(3), f(1)];
}

/** [batch, H, W] class ids or [batch, classes, H, W] scores: a colour per class, and each class's share. */
export function renderMasks(tensor: Tensor, labels: readonly string[] | undefined): RenderedImage[] {
  const scores = tensor.shape.length === 4;
  const [items = 0] = tensor.shape;
  const [classes, height, width] = scores
    ? [tensor.shape[1] ?? 0, tensor.shape[2] ?? 0, tensor.shape[3] ?? 0]
    : [0, tensor.shape[1] ?? 0, tensor.shape[2] ?? 0];
  const read = numberReader(tensor);
  const plane = height * width;
  const out: RenderedImage[] = [];
  for (let item = 0; item < items; item++) {
    const pixels = new Uint8Array(plane * 3);
    const counts = new Map<number, number>();
    for (let p = 0; p < plane; p++) {
      let best = 0;
      if (scores) {
        let top = Number.NEGATIVE_INFINITY;
        for (let k = 0; k < classes; k++) {
          const v = read((item * classes + k) * plane + p);
          if (v > top) {
            top = v;
            best = k;
          }
        }
      } else best = read(item * plane + p);
      counts.set(best, (counts.get(best) ?? 0) + 1);
      pixels.set(colour(best), p * 3);
    }
    const coverage = Object.fromEntries(
      [...counts.entries()]
        .sort((x, y) => y[1] - x[1])
        .map(([k, n]) => [labels?.[k] ?? String(k), Math.round((n / plane) * 10_000) / 10_000]),
    );
    out.push({ width, height, png: encodePng(pixels, width, height, 3), coverage });
  }
  return out;
}
