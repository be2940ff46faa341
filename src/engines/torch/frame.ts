/**
 * Length-prefixed JSON frames for the worker control channel: a u32 little-endian byte count,
 * then that many bytes of UTF-8 JSON. Only headers travel this way; tensor bytes live in the arenas.
 */

export const MAX_FRAME_BYTES = 16 * 1024 * 1024;

export function encodeFrame(message: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(message), 'utf8');
  const frame = Buffer.allocUnsafe(4 + body.length);
  frame.writeUInt32LE(body.length, 0);
  body.copy(frame, 4);
  return frame;
}

/** Accumulates socket chunks and yields complete messages; chunks may split or join frames arbitrarily. */
export class FrameDecoder {
  private pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): unknown[] {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const messages: unknown[] = [];
    let offset = 0;
    while (this.pending.length - offset >= 4) {
      const length = this.pending.readUInt32LE(offset);
      if (length > MAX_FRAME_BYTES) throw new Error(`control frame of ${length} bytes exceeds ${MAX_FRAME_BYTES}`);
      if (this.pending.length - offset - 4 < length) break;
      messages.push(JSON.parse(this.pending.toString('utf8', offset + 4, offset + 4 + length)));
      offset += 4 + length;
    }
    this.pending = offset === this.pending.length ? Buffer.alloc(0) : this.pending.subarray(offset);
    return messages;
  }
}
