import { crc32, deflateSync } from 'node:zlib';

/**
 * A PNG file of 8-bit pixels (grayscale, RGB or RGBA), height x width x channels in row order:
 * what a model's image or mask output is answered as (MCP image content). Unfiltered rows,
 * deflated: small enough for masks and model-sized images, and no dependency.
 */
export function encodePng(pixels: Uint8Array, width: number, height: number, channels: 1 | 3 | 4): Buffer {
  if (pixels.byteLength !== width * height * channels)
    throw new Error(`${pixels.byteLength} bytes are not ${width}x${height}x${channels} pixels`);
  const stride = width * channels;
  // Each row is preceded by its filter type: 0, none.
  const rows = Buffer.alloc((stride + 1) * height);
  for (let y = 0; y < height; y++) rows.set(pixels.subarray(y * stride, (y + 1) * stride), y * (stride + 1) + 1);
  return encodePngRows(rows, width, height, channels);
}

/** A PNG of rows already laid out as PNG wants them: each a filter-type byte, then its pixels. */
export function encodePngRows(rows: Uint8Array, width: number, height: number, channels: 1 | 3 | 4): Buffer {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bits per channel
  header[9] = channels === 1 ? 0 : channels === 3 ? 2 : 6; // grayscale, truecolour, truecolour + alpha
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', deflateSync(rows)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

function chunk(type: string, data: Buffer): Buffer {
  const out = Buffer.alloc(12 + data.byteLength);
  out.writeUInt32BE(data.byteLength, 0);
  out.write(type, 4, 'latin1');
  data.copy(out, 8);
  out.writeUInt32BE(crc32(out.subarray(4, 8 + data.byteLength)), 8 + data.byteLength);
  return out;
}
