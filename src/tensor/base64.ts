/**
 * Inline binary tensors: `{dtype, shape, b64}`. The byte count is computed from the string length
 * and padding before anything is decoded, so a wrong size is refused without allocating. Buffer.from
 * silently skips characters outside the alphabet, so a decoded length short of the expected one
 * reveals them; only then is the string scanned to say where the bad character is.
 */
import { tgError } from '../errors.js';
import { type DType, dtypeSize } from './dtype.js';
import type { TensorSource } from './source.js';
import { byteLength, checkShape, formatType, makeTensor, numel, type Tensor } from './tensor.js';

const ALPHABET = /^[A-Za-z0-9+/_-]*={0,2}$/;

export interface FromBase64Options {
  /** Refuse (INPUT_TOO_LARGE) payloads that decode to more bytes than this. */
  maxBytes?: number;
}

function alphabetError(b64: string): Error | undefined {
  if (ALPHABET.test(b64)) return undefined;
  const at = b64.search(/[^A-Za-z0-9+/_=-]|=(?=[^=])/);
  if (at < 0) return badPadding();
  const ch = b64[at] ?? '';
  const what = /\s/.test(ch) ? 'whitespace' : `character ${JSON.stringify(ch)}`;
  return tgError(
    'BAD_TENSOR',
    `b64 is not valid base64: unexpected ${what} at position ${at}; use the standard alphabet ` +
      '(A-Z a-z 0-9 + /) on one line, with = padding only at the end',
    { position: at },
  );
}

function badPadding(): Error {
  return tgError('BAD_TENSOR', 'b64 is not valid base64: it may end with at most two "=" padding characters');
}

/** Bytes that a base64 string decodes to, from its length and padding; -1 when no valid string has that length. */
export function decodedBase64Length(b64: string): number {
  let pad = 0;
  if (b64.endsWith('==')) pad = 2;
  else if (b64.endsWith('=')) pad = 1;
  if (pad > 0 && b64.length % 4 !== 0) return -1;
  const chars = b64.length - pad;
  if (chars % 4 === 1) return -1;
  return Math.floor((chars * 3) / 4);
}

/**
 * Checks that `b64` can hold `dtype[shape]` (length, padding, size limit) without decoding it, and
 * returns the byte length it decodes to. Characters outside the alphabet are caught when decoding.
 */
function checkBase64(dtype: DType, shape: number[], b64: string, opts: FromBase64Options): number {
  checkShape(shape);
  const got = decodedBase64Length(b64);
  if (got < 0) {
    throw (
      alphabetError(b64) ??
      tgError(
        'BAD_TENSOR',
        `b64 has ${b64.length} characters, which is not a valid base64 length; send the whole standard base64 ` +
          'string without line breaks or whitespace',
        { length: b64.length },
      )
    );
  }
  const max = opts.maxBytes ?? Number.POSITIVE_INFINITY;
  if (got > max) {
    throw tgError(
      'INPUT_TOO_LARGE',
      `b64 decodes to ${got} bytes, over the ${max}-byte limit for inline data; ` +
        'send large tensors as a .npy or .safetensors file path, or over the binary HTTP data plane',
      { bytes: got, maxBytes: max },
    );
  }
  const expected = byteLength(dtype, shape);
  if (got !== expected) {
    throw (
      alphabetError(b64) ??
      tgError(
        'BYTE_LENGTH_MISMATCH',
        `b64 decodes to ${got} bytes but ${formatType(dtype, shape)} needs ${expected} ` +
          `(${numel(shape)} elements x ${dtypeSize(dtype)} bytes); the data must be the raw little-endian ` +
          'row-major bytes of the array (numpy: base64.b64encode(arr.astype(dtype).tobytes())), ' +
          'or the dtype or shape is wrong',
        { dtype, shape, expected, got },
      )
    );
  }
  return expected;
}

/** Decodes base64 raw little-endian row-major bytes into a tensor of `dtype` and `shape`. */
export function fromBase64(dtype: DType, shape: number[], b64: string, opts: FromBase64Options = {}): Tensor {
  const expected = checkBase64(dtype, shape, b64, opts);
  // Buffer.from skips characters outside the alphabet, so each one shortens the output: a full-length
  // result proves the alphabet at no extra cost (the regular expression costs more than decoding).
  const data = Buffer.from(b64, 'base64');
  if (data.byteLength !== expected) throw alphabetError(b64) ?? badPadding();
  return makeTensor(dtype, shape, data);
}

/** Bytes of any kind (an encoded file) from base64, checked as tensor data is: length, padding, alphabet, limit. */
export function fromBase64Bytes(b64: string, opts: FromBase64Options = {}): Buffer {
  const got = decodedBase64Length(b64);
  if (got < 0) throw alphabetError(b64) ?? badPadding();
  const max = opts.maxBytes ?? Number.POSITIVE_INFINITY;
  if (got > max)
    throw tgError('INPUT_TOO_LARGE', `base64 decodes to ${got} bytes, over the ${max}-byte limit for inline data`, {
      bytes: got,
      maxBytes: max,
    });
  const data = Buffer.from(b64, 'base64');
  if (data.byteLength !== got) throw alphabetError(b64) ?? badPadding();
  return data;
}

/**
 * Checks `b64` now and decodes it later, straight into the destination (an arena slot), with no
 * intermediate buffer. A character outside the alphabet is reported when it is decoded.
 */
export function base64Source(dtype: DType, shape: number[], b64: string, opts: FromBase64Options = {}): TensorSource {
  const expected = checkBase64(dtype, shape, b64, opts);
  return {
    dtype,
    shape,
    byteLength: expected,
    fill(target) {
      const out = Buffer.from(target.buffer, target.byteOffset, target.byteLength);
      if (out.write(b64, 'base64') !== expected) throw alphabetError(b64) ?? badPadding();
    },
  };
}

/** The tensor's bytes as standard base64. */
export function toBase64(t: Tensor): string {
  return Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).toString('base64');
}
