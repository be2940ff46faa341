/**
 * numpy `.npy` files (format versions 1.0, 2.0 and 3.0). Decoding returns a zero-copy view of the
 * data; encoding writes the header numpy writes (data starting at a multiple of 64 bytes) and can
 * hand back header and data separately so a caller can stream them without concatenating.
 */
import { tgError } from '../errors.js';
import { DTYPES, type DType, dtypeFromNpyDescr, npyDescr } from './dtype.js';
import { byteLength, makeTensor, type Tensor } from './tensor.js';

const MAGIC = Buffer.from('\x93NUMPY', 'latin1');
const ALIGN = 64;
const SUPPORTED = DTYPES.map(npyDescr)
  .filter((d) => d !== undefined)
  .join(', ');

function bad(message: string, data: Record<string, unknown> = {}): Error {
  return tgError('BAD_TENSOR', `.npy: ${message}`, data);
}

/** The header dict's three keys, each with its value's pattern; compiled once, not per file. */
const FIELDS = {
  descr: fieldPattern('descr', `['"]([^'"]*)['"]`),
  fortran_order: fieldPattern('fortran_order', '(True|False)'),
  shape: fieldPattern('shape', '\\(([^)]*)\\)'),
};

function fieldPattern(key: string, value: string): RegExp {
  return new RegExp(`['"]${key}['"]\\s*:\\s*${value}`);
}

function field(header: string, key: keyof typeof FIELDS): string | undefined {
  return FIELDS[key].exec(header)?.[1];
}

function parseDescr(header: string): DType {
  const descr = field(header, 'descr');
  if (descr === undefined) {
    throw bad("structured or unreadable dtype in the header; save a plain numeric array (e.g. arr.astype('<f4'))", {
      header,
    });
  }
  const dtype = dtypeFromNpyDescr(descr);
  if (dtype !== undefined) return dtype;
  if (descr.startsWith('>')) {
    throw bad(`dtype ${descr} is big-endian; tensors are little-endian: save arr.astype(arr.dtype.newbyteorder('<'))`, {
      descr,
    });
  }
  if (descr.includes('O')) {
    throw bad('object arrays (pickled Python objects) are never loaded; save a numeric array', { descr });
  }
  throw bad(`dtype ${descr} is not supported; use one of ${SUPPORTED} (convert with arr.astype(...))`, { descr });
}

function parseShape(header: string): number[] {
  const inner = field(header, 'shape');
  if (inner === undefined) throw bad("the header has no 'shape' tuple; write the file with numpy.save", { header });
  const parts = inner
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  return parts.map((s) => {
    if (!/^\d+L?$/.test(s)) throw bad(`shape (${inner}) has a non-integer dimension "${s}"`, { header });
    return Number.parseInt(s, 10);
  });
}

/**
 * Where an array's data lies in a file and what it holds: a `.npy` file's (from its first bytes), or
 * one tensor's of a `.safetensors` file (from its header). `dataStart` counts from the file's start.
 */
export interface TensorLayout {
  dtype: DType;
  shape: number[];
  dataStart: number;
  dataBytes: number;
}

/**
 * Parses the header at the start of a `.npy` file. `head` holds the file's first bytes (all of
 * them, or at least the whole header); `fileBytes` is the file's full size, checked against the
 * header so that a truncated or padded file is refused before any data is read.
 */
export function parseNpyLayout(head: Uint8Array, fileBytes: number): TensorLayout {
  if (head.byteLength < 10 || !MAGIC.equals(head.subarray(0, 6))) {
    throw bad('not a .npy file (no \\x93NUMPY magic at the start); write it with numpy.save');
  }
  const major = head[6] as number;
  const minor = head[7] as number;
  const view = new DataView(head.buffer, head.byteOffset, head.byteLength);
  let start = 10;
  let headerLen: number;
  if (major === 1) {
    headerLen = view.getUint16(8, true);
  } else if ((major === 2 || major === 3) && head.byteLength >= 12) {
    start = 12;
    headerLen = view.getUint32(8, true);
  } else {
    throw bad(`format version ${major}.${minor} is not supported; numpy.save writes 1.0, 2.0 or 3.0`, {
      version: `${major}.${minor}`,
    });
  }
  const dataStart = start + headerLen;
  if (dataStart > head.byteLength) {
    throw bad(`the header says it is ${headerLen} bytes but the file ends first; the file is truncated`);
  }
  const header = Buffer.from(head.buffer, head.byteOffset + start, headerLen).toString(major === 3 ? 'utf8' : 'latin1');
  const dtype = parseDescr(header);
  if (field(header, 'fortran_order') !== 'False') {
    throw bad('the array is stored in Fortran (column-major) order; save numpy.ascontiguousarray(arr) instead', {
      header,
    });
  }
  const shape = parseShape(header);
  const expected = byteLength(dtype, shape);
  const got = fileBytes - dataStart;
  if (got !== expected) {
    const what = got < expected ? 'the file is truncated' : 'the file has trailing bytes';
    throw bad(`${dtype}[${shape.join(',')}] needs ${expected} data bytes but the file holds ${got}; ${what}`, {
      expected,
      got,
    });
  }
  return { dtype, shape, dataStart, dataBytes: expected };
}

/** Reads a `.npy` file; the tensor's data is a view into `bytes`. */
export function decodeNpy(bytes: Uint8Array): Tensor {
  const { dtype, shape, dataStart, dataBytes } = parseNpyLayout(bytes, bytes.byteLength);
  return makeTensor(dtype, shape, bytes.subarray(dataStart, dataStart + dataBytes));
}

/**
 * The `.npy` header (magic, version, length, dict, padding) for a tensor of this dtype and shape.
 * `length`, when given, pads it to that many bytes (a multiple of 64, at least its own length):
 * a file that grows rewrites its header in place with the new row count, so the header is sized
 * for the most rows it will hold.
 */
export function encodeNpyHeader(dtype: DType, shape: readonly number[], length?: number): Buffer {
  const descr = npyDescr(dtype);
  if (descr === undefined) {
    throw tgError(
      'BAD_TENSOR',
      `numpy has no ${dtype} dtype, so this tensor cannot be written as .npy; ` +
        'fetch it as .safetensors (BF16) or have the model return float32',
      { dtype },
    );
  }
  const shapeRepr = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  const dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeRepr}, }`;
  // Version 1.0 always suffices: shapes have at most MAX_RANK (32) dimensions, so the dict stays
  // far below the 64 KiB a 1.0 header can describe. Reading accepts 2.0 and 3.0 as numpy writes them.
  const prefix = 10;
  const natural = prefix + dict.length + 1 + ((ALIGN - ((prefix + dict.length + 1) % ALIGN)) % ALIGN);
  if (length !== undefined && (length < natural || length % ALIGN !== 0 || length - prefix > 0xffff))
    throw new RangeError(`a .npy header of ${natural} bytes cannot be padded to ${length}`);
  const headerLen = (length ?? natural) - prefix;
  const out = Buffer.alloc(prefix + headerLen, 0x20);
  MAGIC.copy(out, 0);
  out[6] = 1;
  out[7] = 0;
  out.writeUInt16LE(headerLen, 8);
  out.write(dict, prefix, 'latin1');
  out[out.length - 1] = 0x0a;
  return out;
}

/** Header and data of the `.npy` encoding, for streaming; the data is the tensor's own bytes. */
export function encodeNpyParts(t: Tensor): [header: Buffer, data: Uint8Array] {
  return [encodeNpyHeader(t.dtype, t.shape), t.data];
}

/** The whole `.npy` file in one buffer (one copy of the data). */
export function encodeNpy(t: Tensor): Buffer {
  return Buffer.concat(encodeNpyParts(t));
}
