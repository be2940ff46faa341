import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { tgError } from '../errors.js';
import type { ModelConfig } from '../registry/model-config.js';
import { IMAGE_FORMATS, type ImageFormat, type ImageInputConfig } from '../registry/processing.js';
import { fromBase64Bytes } from '../tensor/base64.js';
import { bytesSource, splitBytes } from '../tensor/bytes-tensor.js';
import type { TensorSource } from '../tensor/source.js';
import type { DecodeContext, DecodedInput } from './decode-inputs.js';
import { resolveAllowedPath } from './decode-inputs.js';

/**
 * The inputs of a model with processing: what an agent holds (an image file's path, a data: URI,
 * base64 of the file) read into encoded bytes, one item per image, and sent on as a BYTES input
 * for the worker to decode. Nothing is decoded here: the gateway only reads bytes and looks at
 * their first few to refuse what no worker could decode, without a round trip.
 */

export const IMAGE_INPUT_FORMS =
  'an image: an absolute path (or file:// URL) of a PNG, JPEG, WebP, GIF or BMP file under an allowed root, ' +
  'a data: URI ("data:image/png;base64,..."), base64 of the file, {"path": ...} or {"b64": ...}; ' +
  'or a list of these for several images at once';

export function decodeProcessedInputs(
  config: ModelConfig,
  inputs: Record<string, unknown>,
  ctx: DecodeContext,
): DecodedInput[] {
  const processed = config.processing?.inputs ?? {};
  const names = Object.keys(processed);
  for (const name of Object.keys(inputs))
    if (!(name in processed))
      throw tgError(
        'UNKNOWN_INPUT',
        `input "${name}" is not taken by ${config.name}; it takes ${names.map((n) => `"${n}" (${IMAGE_INPUT_FORMS})`).join(', ')}`,
        { input: name, expected: names },
      );
  return names.map((name) => {
    const value = inputs[name];
    if (value === undefined)
      throw tgError('MISSING_INPUT', `input "${name}" is missing: ${config.name} takes ${IMAGE_INPUT_FORMS}`, {
        input: name,
      });
    const start = performance.now();
    const image = processed[name] as ImageInputConfig;
    const values = Array.isArray(value) ? value : [value];
    if (values.length === 0)
      throw tgError('BAD_IMAGE', `input "${name}" is an empty list; give at least one image`, { input: name });
    let form: DecodedInput['form'] = 'path';
    const items = values.map((v, item) => {
      const read = readImage(name, values.length > 1 ? item : undefined, v, image, ctx);
      form = read.form;
      return read.bytes;
    });
    return { name, tensor: bytesSource(items), form, decodeMs: performance.now() - start };
  });
}

/**
 * The BYTES inputs of an OIP v2 request to a model with processing: binary elements are the image
 * files' bytes; JSON elements are strings, each read as an agent's value is (a path, data: URI or
 * base64). Either way each image gets the same checks as over MCP.
 */
export function preparedProcessedInputs(
  config: ModelConfig,
  inputs: Map<string, TensorSource>,
  form: DecodedInput['form'],
  ctx: DecodeContext,
): DecodedInput[] {
  const processed = config.processing?.inputs ?? {};
  const names = Object.keys(processed);
  for (const [name, source] of inputs) {
    if (!(name in processed))
      throw tgError(
        'UNKNOWN_INPUT',
        `input "${name}" is not taken by ${config.name}; it takes ${names.map((n) => `"${n}" (BYTES)`).join(', ')}`,
        {
          input: name,
          expected: names,
        },
      );
    if (!source.bytes)
      throw tgError('BAD_TENSOR', `input "${name}" of ${config.name} is BYTES: one element per image file`, {
        input: name,
      });
  }
  return names.map((name) => {
    const source = inputs.get(name);
    if (!source)
      throw tgError(
        'MISSING_INPUT',
        `input "${name}" is missing: ${config.name} takes it as BYTES, one element per image`,
        {
          input: name,
        },
      );
    const start = performance.now();
    const image = processed[name] as ImageInputConfig;
    const elements = splitBytes(source.data ?? serialised(source));
    const several = elements.length > 1;
    const items = elements.map((element, item) =>
      form === 'binary'
        ? checkImage(name, several ? item : undefined, element, 'the BYTES element', image)
        : readImage(name, several ? item : undefined, Buffer.from(element).toString('utf8'), image, ctx).bytes,
    );
    return { name, tensor: bytesSource(items), form, decodeMs: performance.now() - start };
  });
}

function serialised(source: TensorSource): Buffer {
  const data = Buffer.allocUnsafe(source.byteLength);
  source.fill(data);
  return data;
}

function readImage(
  input: string,
  item: number | undefined,
  value: unknown,
  image: ImageInputConfig,
  ctx: DecodeContext,
): { form: DecodedInput['form']; bytes: Uint8Array } {
  const where = item === undefined ? `input "${input}"` : `input "${input}" item ${item}`;
  const data = { input, ...(item !== undefined ? { item } : {}) };
  let form: DecodedInput['form'];
  let bytes: Uint8Array;
  let source: string;
  const maxBytes = ctx.config.maxInputBytes;
  const fromBase64 = (b64: string) => {
    try {
      return fromBase64Bytes(b64, { maxBytes });
    } catch (err) {
      const e = err as Error & { code?: string };
      throw tgError(e.code === 'INPUT_TOO_LARGE' ? 'INPUT_TOO_LARGE' : 'BAD_IMAGE', `${where}: ${e.message}`, data);
    }
  };
  const obj = value !== null && typeof value === 'object' ? (value as Record<string, unknown>) : undefined;
  const text = typeof value === 'string' ? value.trim() : typeof obj?.path === 'string' ? obj.path : undefined;
  if (text === '') throw tgError('BAD_IMAGE', `${where}: the image is an empty string`, data);
  if (typeof obj?.b64 === 'string') {
    form = 'b64';
    source = 'the base64 data';
    bytes = fromBase64(obj.b64);
  } else if (text?.startsWith('data:')) {
    form = 'b64';
    source = 'the data: URI';
    const comma = text.indexOf(',');
    if (comma < 0 || !text.slice(0, comma).endsWith(';base64'))
      throw tgError('BAD_IMAGE', `${where}: a data: URI must be base64, as in "data:image/png;base64,iVBOR..."`, data);
    bytes = fromBase64(text.slice(comma + 1));
  } else if (text !== undefined && looksLikePath(text, obj !== undefined)) {
    form = 'path';
    const path = text.startsWith('file://')
      ? fileURLToPath(text)
      : text.startsWith('~/')
        ? `${homedir()}${text.slice(1)}`
        : text;
    source = path;
    const { real, size } = resolveAllowedPath(input, path, ctx.config.allowedRoots);
    if (size > maxBytes)
      throw tgError('INPUT_TOO_LARGE', `${where}: ${path} is ${size} bytes, over the ${maxBytes}-byte limit`, {
        ...data,
        bytes: size,
        limit: maxBytes,
      });
    bytes = readFileSync(real);
  } else if (text !== undefined) {
    form = 'b64';
    source = 'the base64 data';
    bytes = fromBase64(text);
  } else {
    throw tgError(
      'BAD_IMAGE',
      `${where}: ${obj?.handle !== undefined || (typeof value === 'string' && value.startsWith('tensor://')) ? 'a tensor handle holds a tensor, not an image file; ' : ''}expected ${IMAGE_INPUT_FORMS}`,
      data,
    );
  }
  return { form, bytes: checkImage(input, item, bytes, source, image) };
}

/** Refuses what an image's first bytes already show: empty, not an image, a format not taken. */
function checkImage(
  input: string,
  item: number | undefined,
  bytes: Uint8Array,
  source: string,
  image: ImageInputConfig,
): Uint8Array {
  const where = item === undefined ? `input "${input}"` : `input "${input}" item ${item}`;
  const data = { input, ...(item !== undefined ? { item } : {}) };
  if (bytes.byteLength === 0) throw tgError('BAD_IMAGE', `${where}: ${source} is empty (0 bytes)`, data);
  const format = sniffImage(bytes);
  if (format === undefined)
    throw tgError(
      'BAD_IMAGE',
      `${where}: ${source} is not a PNG, JPEG, WebP, GIF or BMP image (${describeBytes(bytes)})`,
      data,
    );
  if (!(IMAGE_FORMATS as readonly string[]).includes(format) || !image.formats.includes(format as ImageFormat))
    throw tgError(
      'IMAGE_FORMAT_NOT_SUPPORTED',
      `${where}: ${source} is a ${format.toUpperCase()} image; this model takes ${image.formats.map((f) => f.toUpperCase()).join(', ')}. Convert it first (for example to PNG)`,
      { ...data, format, formats: image.formats },
    );
  return bytes;
}

/**
 * A string names a file when it is a path or file:// URL. Base64 can begin with "/" too (every
 * JPEG's does: "/9j/"), so a long string of the base64 alphabet alone is data, not a path.
 */
function looksLikePath(text: string, explicit: boolean): boolean {
  if (explicit || text.startsWith('file://') || text.startsWith('~/')) return true;
  if (!text.startsWith('/')) return !/^[A-Za-z0-9+/]+={0,2}$/.test(text) || text.length < 64;
  return text.length < 4096 && !(text.startsWith('/9j/') && /^[A-Za-z0-9+/]+={0,2}$/.test(text));
}

const SIGNATURES: [string, (b: Uint8Array) => boolean][] = [
  ['png', (b) => b[0] === 0x89 && b[1] === 0x50 && b[2] === 0x4e && b[3] === 0x47],
  ['jpeg', (b) => b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff],
  ['gif', (b) => ascii(b, 0, 4) === 'GIF8'],
  ['webp', (b) => ascii(b, 0, 4) === 'RIFF' && ascii(b, 8, 12) === 'WEBP'],
  ['bmp', (b) => ascii(b, 0, 2) === 'BM'],
  ['tiff', (b) => ascii(b, 0, 4) === 'II*\0' || ascii(b, 0, 4) === 'MM\0*'],
  ['heic', (b) => ascii(b, 4, 8) === 'ftyp' && ['heic', 'heix', 'mif1', 'msf1'].includes(ascii(b, 8, 12))],
  ['avif', (b) => ascii(b, 4, 8) === 'ftyp' && ascii(b, 8, 12).startsWith('avi')],
  ['ico', (b) => b[0] === 0 && b[1] === 0 && b[2] === 1 && b[3] === 0],
];

/** The image format the bytes begin with; the bytes decide, not a file's extension. */
export function sniffImage(bytes: Uint8Array): string | undefined {
  return SIGNATURES.find(([, test]) => test(bytes))?.[0];
}

function ascii(b: Uint8Array, from: number, to: number): string {
  return Buffer.from(b.subarray(from, to)).toString('latin1');
}

function describeBytes(bytes: Uint8Array): string {
  const head = Buffer.from(bytes.subarray(0, 64)).toString('latin1');
  if (head.startsWith('%PDF')) return 'it is a PDF document';
  if (/^\s*<(\?xml|svg)/i.test(head)) return 'it is XML or SVG text; rasterise SVG to PNG first';
  if (/^[\t\n\r -~]*$/.test(head)) return `it begins with text: ${JSON.stringify(head.slice(0, 24))}`;
  return `${bytes.byteLength} bytes beginning ${Buffer.from(bytes.subarray(0, 8)).toString('hex')}`;
}
