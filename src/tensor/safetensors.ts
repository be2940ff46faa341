/**
 * safetensors files: an 8-byte little-endian header length, a JSON header mapping each tensor name
 * to `{dtype, shape, data_offsets: [begin, end]}` (offsets relative to the byte buffer after the
 * header), then the bytes. Decoding validates the header as the reference implementation does
 * (tensors cover the buffer contiguously, without holes or overlaps) and returns zero-copy views.
 */
import { tgError } from '../errors.js';
import { DTYPES, dtypeFromSafetensors, dtypeSize, safetensorsDType } from './dtype.js';
import type { TensorLayout } from './npy.js';
import { byteLength, checkShape, makeTensor, type Tensor } from './tensor.js';

const MAX_HEADER_BYTES = 100_000_000;
const METADATA_KEY = '__metadata__';
const SUPPORTED = DTYPES.map(safetensorsDType).join(', ');

function bad(message: string, data: Record<string, unknown> = {}): Error {
  return tgError('BAD_TENSOR', `.safetensors: ${message}`, data);
}

interface Entry {
  name: string;
  begin: number;
  end: number;
  tensor: Omit<Tensor, 'data'>;
}

function parseEntry(name: string, info: unknown): Entry {
  if (info === null || typeof info !== 'object') throw bad(`entry "${name}" is not an object`, { name });
  const { dtype: tag, shape, data_offsets: offsets } = info as Record<string, unknown>;
  const dtype = typeof tag === 'string' ? dtypeFromSafetensors(tag) : undefined;
  if (dtype === undefined) {
    throw bad(`tensor "${name}" has dtype ${JSON.stringify(tag)}; supported dtypes are ${SUPPORTED}`, { name });
  }
  try {
    checkShape(shape);
  } catch (err) {
    throw bad(`tensor "${name}": ${(err as Error).message}`, { name });
  }
  if (
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every((o) => typeof o === 'number' && Number.isSafeInteger(o) && o >= 0)
  ) {
    throw bad(`tensor "${name}" needs data_offsets [begin, end] of two non-negative integers`, { name });
  }
  const [begin, end] = offsets as [number, number];
  const expected = byteLength(dtype, shape);
  if (end - begin !== expected) {
    throw bad(
      `tensor "${name}" is ${dtype}[${shape.join(',')}] = ${expected} bytes but its data_offsets [${begin}, ${end}] span ${end - begin}`,
      { name, expected, got: end - begin },
    );
  }
  return { name, begin, end, tensor: { dtype, shape } };
}

/** The header's length, from the file's first 8 bytes, checked against the file's size. */
export function safetensorsHeaderBytes(first8: Uint8Array, fileBytes: number): number {
  if (fileBytes < 8) throw bad(`the file is ${fileBytes} bytes, too short for the 8-byte header length`);
  const n = new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true);
  if (n > BigInt(Math.min(MAX_HEADER_BYTES, fileBytes - 8))) {
    throw bad(`the header length ${n} runs past the end of the ${fileBytes}-byte file (or the 100 MB cap)`);
  }
  return Number(n);
}

/**
 * Every tensor's layout in a `.safetensors` file, in header order. `head` holds the file's first
 * bytes, at least the 8-byte length and the header; `fileBytes` is the file's full size. The header
 * is validated as the reference implementation does: the tensors cover the data contiguously,
 * without holes or overlaps, up to the file's end.
 */
export function parseSafetensorsLayouts(head: Uint8Array, fileBytes: number): Map<string, TensorLayout> {
  const n = safetensorsHeaderBytes(head, fileBytes);
  const dataStart = 8 + n;
  if (head.byteLength < dataStart) throw bad(`the header is ${n} bytes but only ${head.byteLength - 8} were given`);
  let header: unknown;
  try {
    header = JSON.parse(Buffer.from(head.buffer, head.byteOffset + 8, n).toString('utf8'));
  } catch (err) {
    throw bad(`the header is not valid JSON (${(err as Error).message})`);
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header)) {
    throw bad('the header must be a JSON object mapping tensor names to {dtype, shape, data_offsets}');
  }
  const entries = Object.entries(header)
    .filter(([name]) => name !== METADATA_KEY)
    .map(([name, info]) => parseEntry(name, info));
  const sorted = [...entries].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let cursor = 0;
  for (const e of sorted) {
    if (e.begin !== cursor) {
      const what = e.begin < cursor ? 'overlaps the tensor before it' : `leaves a gap after byte ${cursor}`;
      throw bad(`tensor "${e.name}" at data_offsets [${e.begin}, ${e.end}] ${what}`, { name: e.name });
    }
    cursor = e.end;
  }
  const dataLen = fileBytes - dataStart;
  if (cursor !== dataLen) {
    throw bad(
      `the tensors cover ${cursor} bytes but the file holds ${dataLen} after the header; it is truncated or padded`,
      { expected: cursor, got: dataLen },
    );
  }
  return new Map(
    entries.map((e) => [
      e.name,
      { ...e.tensor, shape: [...e.tensor.shape], dataStart: dataStart + e.begin, dataBytes: e.end - e.begin },
    ]),
  );
}

/** Reads every tensor of a `.safetensors` file, in header order; each one's data is a view into `bytes`. */
export function decodeSafetensors(bytes: Uint8Array): Map<string, Tensor> {
  const out = new Map<string, Tensor>();
  for (const [name, { dtype, shape, dataStart, dataBytes }] of parseSafetensorsLayouts(bytes, bytes.byteLength)) {
    out.set(name, makeTensor(dtype, shape, bytes.subarray(dataStart, dataStart + dataBytes)));
  }
  return out;
}

/**
 * Writes tensors as one `.safetensors` buffer. Larger element types come first and the header is
 * space-padded to a multiple of 8, so every tensor's data is aligned for its element type.
 */
export function encodeSafetensors(
  tensors: Map<string, Tensor> | Record<string, Tensor>,
  metadata?: Record<string, string>,
): Buffer {
  const list = tensors instanceof Map ? [...tensors] : Object.entries(tensors);
  const ordered = list.sort(
    ([an, a], [bn, b]) => dtypeSize(b.dtype) - dtypeSize(a.dtype) || (an < bn ? -1 : an > bn ? 1 : 0),
  );
  const header: Record<string, unknown> = {};
  if (metadata !== undefined) header[METADATA_KEY] = metadata;
  let offset = 0;
  for (const [name, t] of ordered) {
    if (name === METADATA_KEY) throw bad(`"${METADATA_KEY}" is reserved and cannot name a tensor`);
    makeTensor(t.dtype, t.shape, t.data);
    const end = offset + t.data.byteLength;
    header[name] = { dtype: safetensorsDType(t.dtype), shape: t.shape, data_offsets: [offset, end] };
    offset = end;
  }
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  const headerLen = Math.ceil(json.length / 8) * 8;
  const out = Buffer.alloc(8 + headerLen + offset, 0x20);
  out.writeBigUInt64LE(BigInt(headerLen), 0);
  json.copy(out, 8);
  let at = 8 + headerLen;
  for (const [, t] of ordered) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  return out;
}
