import { closeSync } from 'node:fs';
import { homedir } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { type ErrorCode, tgError } from '../errors.js';
import {
  IMAGE_FORMATS,
  type ImageFormat,
  type ImageInputConfig,
  type ProcessedInputConfig,
} from '../registry/processing.js';
import { openAllowedFile } from '../security/confined-files.js';
import { fromBase64Bytes } from '../tensor/base64.js';
import { type BytesItem, bytesSource, splitBytes } from '../tensor/bytes-tensor.js';
import type { TensorSource } from '../tensor/source.js';
import { TENSOR_URI_PREFIX } from '../tensor/store.js';
import { readFileHead } from '../tensor/tensor-file.js';
import type { DecodeContext, DecodedInput } from './decode-inputs.js';
import { renderImages } from './render-images.js';

/**
 * The inputs of a model with processing: what an agent holds (an image or WAV file's path, a
 * data: URI, base64 of the file, a sentence) read into bytes, one item per file or text, and sent
 * on as a BYTES input for the worker to decode. Nothing is decoded here: the gateway only reads
 * bytes and looks at their first few to refuse what no worker could decode, without a round trip.
 */

const FILE_FORMS =
  'an absolute path (or file:// URL) under an allowed root, a data: URI, base64 of the file, {"path": ...} or {"b64": ...}; or a list of these for several at once';

/** What an agent may pass for a processed input, in words for tool descriptions and errors. */
export function inputForms(input: ProcessedInputConfig): string {
  switch (input.type) {
    case 'image':
      return `an image (${input.formats.map((f) => f.toUpperCase()).join(', ')}): ${FILE_FORMS}; or a tensor:// handle of pictures (an earlier call's image output)`;
    case 'audio':
      return `a WAV recording (PCM or float; mixed to mono and resampled to ${input.sample_rate} Hz): ${FILE_FORMS}`;
    case 'text':
      return 'a string of text, or a list of strings for several texts at once';
  }
}

/** The code for an item of this kind that cannot be read at all. */
function badCode(input: ProcessedInputConfig): ErrorCode {
  return input.type === 'image' ? 'BAD_IMAGE' : input.type === 'audio' ? 'BAD_AUDIO' : 'BAD_TEXT';
}

interface Item {
  input: string;
  /** Its place in a list, when the value is one. */
  item: number | undefined;
  config: ProcessedInputConfig;
}

function where({ input, item }: Item): string {
  return item === undefined ? `input "${input}"` : `input "${input}" item ${item}`;
}

function errorData({ input, item }: Item): Record<string, unknown> {
  return { input, ...(item !== undefined ? { item } : {}) };
}

/** What owns processed inputs: a model with processing, or a workflow taking files. */
export interface ProcessingOwner {
  name: string;
  processing?: { inputs: Record<string, ProcessedInputConfig> } | undefined;
}

function checkedNames(config: ProcessingOwner, given: Iterable<string>, takes: (name: string) => string): string[] {
  const processed = config.processing?.inputs ?? {};
  const names = Object.keys(processed);
  for (const name of given)
    if (!(name in processed))
      throw tgError(
        'UNKNOWN_INPUT',
        `input "${name}" is not taken by ${config.name}; it takes ${names.map((n) => `"${n}" (${takes(n)})`).join(', ')}`,
        { input: name, expected: names },
      );
  return names;
}

export function decodeProcessedInputs(
  config: ProcessingOwner,
  inputs: Record<string, unknown>,
  ctx: DecodeContext,
): DecodedInput[] {
  const processed = config.processing?.inputs ?? {};
  const names = checkedNames(config, Object.keys(inputs), (n) => inputForms(processed[n] as ProcessedInputConfig));
  return names.map((name) => {
    const input = processed[name] as ProcessedInputConfig;
    const value = inputs[name];
    if (value === undefined)
      throw tgError('MISSING_INPUT', `input "${name}" is missing: ${config.name} takes ${inputForms(input)}`, {
        input: name,
      });
    const start = performance.now();
    const values = Array.isArray(value) ? value : [value];
    if (values.length === 0)
      throw tgError(badCode(input), `input "${name}" is an empty list; give at least one item`, { input: name });
    let form: DecodedInput['form'] = input.type === 'text' ? 'text' : 'path';
    const items = values.flatMap((v, index) => {
      const at = { input: name, item: values.length > 1 ? index : undefined, config: input };
      if (input.type === 'text') return [textBytes(at, v)];
      const handle = handleOf(v);
      if (handle !== undefined) {
        form = 'handle';
        return handleImages(at, handle, ctx);
      }
      const read = readFile(at, v, ctx);
      form = read.form;
      return [read.item];
    });
    return { name, tensor: bytesSource(items), form, decodeMs: performance.now() - start };
  });
}

/**
 * The BYTES inputs of an OIP v2 request to a model with processing. Binary elements are the
 * files' bytes, or a text's UTF-8; JSON elements are strings: a text as it is, a file read as an
 * agent's value is (a path, data: URI or base64). Either way each item gets the same checks as
 * over MCP.
 */
export function preparedProcessedInputs(
  config: ProcessingOwner,
  inputs: Map<string, TensorSource>,
  form: DecodedInput['form'],
  ctx: DecodeContext,
): DecodedInput[] {
  const processed = config.processing?.inputs ?? {};
  const names = checkedNames(config, inputs.keys(), () => 'BYTES');
  for (const [name, source] of inputs)
    if (!source.bytes)
      throw tgError(
        'BAD_TENSOR',
        `input "${name}" of ${config.name} is BYTES: one element per ${elementOf(processed[name] as ProcessedInputConfig)}`,
        { input: name },
      );
  return names.map((name) => {
    const input = processed[name] as ProcessedInputConfig;
    const source = inputs.get(name);
    if (!source)
      throw tgError(
        'MISSING_INPUT',
        `input "${name}" is missing: ${config.name} takes it as BYTES, one element per ${elementOf(input)}`,
        { input: name },
      );
    const start = performance.now();
    const elements = splitBytes(source.data ?? serialised(source));
    const several = elements.length > 1;
    const items = elements.map((element, index): BytesItem => {
      const at = { input: name, item: several ? index : undefined, config: input };
      if (input.type === 'text') return form === 'binary' ? checkUtf8(at, element) : element;
      return form === 'binary'
        ? checkFile(at, element, 'the BYTES element')
        : readFile(at, Buffer.from(element).toString('utf8'), ctx).item;
    });
    return { name, tensor: bytesSource(items), form, decodeMs: performance.now() - start };
  });
}

function elementOf(input: ProcessedInputConfig): string {
  return input.type === 'image' ? 'image file' : input.type === 'audio' ? 'WAV file' : 'text (UTF-8)';
}

function serialised(source: TensorSource): Buffer {
  const data = Buffer.allocUnsafe(source.byteLength);
  source.fill(data);
  return data;
}

function textBytes(at: Item, value: unknown): Uint8Array {
  if (typeof value !== 'string')
    throw tgError(
      'BAD_TEXT',
      `${where(at)}: expected a string of text, got ${value === null ? 'null' : Array.isArray(value) ? 'a nested list' : typeof value}`,
      errorData(at),
    );
  return Buffer.from(value, 'utf8');
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function checkUtf8(at: Item, bytes: Uint8Array): Uint8Array {
  try {
    utf8.decode(bytes);
  } catch {
    throw tgError(
      'BAD_TEXT',
      `${where(at)}: the BYTES element is not valid UTF-8 (${bytes.byteLength} bytes beginning ${Buffer.from(bytes.subarray(0, 8)).toString('hex')}); send text as UTF-8`,
      errorData(at),
    );
  }
  return bytes;
}

/** The tensor:// handle a value is (the URI, or {"handle": URI}), if it is one. */
function handleOf(value: unknown): string | undefined {
  if (typeof value === 'string') return value.trim().startsWith(TENSOR_URI_PREFIX) ? value.trim() : undefined;
  const handle = value !== null && typeof value === 'object' ? (value as Record<string, unknown>).handle : undefined;
  return typeof handle === 'string' ? handle : undefined;
}

const CHANNELS = [1, 3, 4];

/**
 * The pictures a tensor:// handle holds (an earlier call's image output, say), each encoded as a
 * PNG item: [H, W] is one grayscale picture, [C, H, W] or [H, W, C] one picture, and [N, C, H, W]
 * or [N, H, W, C] N of them, with 1, 3 or 4 channels. uint8 values are pixels as they are;
 * floating-point values are taken as 0-1 and scaled to 0-255; values past the range are clamped.
 */
function handleImages(at: Item, uri: string, ctx: DecodeContext): Uint8Array[] {
  const data = errorData(at);
  if (at.config.type !== 'image')
    throw tgError(
      badCode(at.config),
      `${where(at)}: a tensor handle holds a tensor, not a WAV file; pass the recording as ${FILE_FORMS}`,
      data,
    );
  const { tensor } = ctx.store.get(uri);
  const s = tensor.shape;
  let shape: number[] | undefined;
  let layout: 'CHW' | 'HWC' = 'CHW';
  if (s.length === 2) shape = [1, 1, ...s];
  else if (s.length === 3 && CHANNELS.includes(s[2] as number)) [shape, layout] = [[1, ...s], 'HWC'];
  else if (s.length === 3 && CHANNELS.includes(s[0] as number)) shape = [1, ...s];
  else if (s.length === 4 && CHANNELS.includes(s[1] as number)) shape = s;
  else if (s.length === 4 && CHANNELS.includes(s[3] as number)) [shape, layout] = [s, 'HWC'];
  if (!shape || !['uint8', 'float32', 'float16', 'bfloat16', 'float64'].includes(tensor.dtype))
    throw tgError(
      'BAD_IMAGE',
      `${where(at)}: ${uri} is ${tensor.dtype}[${s.join(', ')}], not pictures: a handle given as an image holds uint8 pixels or 0-1 floats shaped [H, W], [C, H, W], [H, W, C], [N, C, H, W] or [N, H, W, C] with 1, 3 or 4 channels`,
      data,
    );
  const [, a = 0, b = 0, c = 0] = shape;
  const pixels = layout === 'CHW' ? b * c : a * b;
  if (pixels > at.config.max_pixels)
    throw tgError(
      'IMAGE_TOO_LARGE',
      `${where(at)}: ${uri} holds pictures of ${pixels} pixels, over this input's limit of ${at.config.max_pixels}`,
      data,
    );
  const rendered = renderImages(
    { ...tensor, shape },
    { type: 'image', layout, scale: tensor.dtype === 'uint8' ? 1 : 255 },
  );
  return rendered.map((r) => r.png);
}

/**
 * Files given by path up to this size are read whole here with the check of their first bytes;
 * larger ones (photos, screenshots, recordings) are read into the worker's arena by the worker
 * itself where it can (FileItem), so their bytes never pass through the gateway's thread.
 */
const READ_WHOLE_UP_TO = 64 * 1024;

/**
 * A file's bytes from any of the forms an agent may hold it in: in memory, or, for a large file
 * given by path, the file itself once its first bytes are checked.
 */
function readFile(at: Item, value: unknown, ctx: DecodeContext): { form: DecodedInput['form']; item: BytesItem } {
  const code = badCode(at.config);
  const data = errorData(at);
  let form: DecodedInput['form'];
  let bytes: Uint8Array;
  let source: string;
  const maxBytes = ctx.config.maxInputBytes;
  const fromBase64 = (b64: string) => {
    try {
      return fromBase64Bytes(b64, { maxBytes });
    } catch (err) {
      const e = err as Error & { code?: string };
      throw tgError(e.code === 'INPUT_TOO_LARGE' ? 'INPUT_TOO_LARGE' : code, `${where(at)}: ${e.message}`, data);
    }
  };
  const obj = value !== null && typeof value === 'object' ? (value as Record<string, unknown>) : undefined;
  const text = typeof value === 'string' ? value.trim() : typeof obj?.path === 'string' ? obj.path : undefined;
  if (text === '') throw tgError(code, `${where(at)}: the value is an empty string`, data);
  if (typeof obj?.b64 === 'string') {
    form = 'b64';
    source = 'the base64 data';
    bytes = fromBase64(obj.b64);
  } else if (text?.startsWith('data:')) {
    form = 'b64';
    source = 'the data: URI';
    const comma = text.indexOf(',');
    if (comma < 0 || !text.slice(0, comma).endsWith(';base64'))
      throw tgError(
        code,
        `${where(at)}: a data: URI must be base64, as in "data:${at.config.type === 'audio' ? 'audio/wav;base64,UklGR' : 'image/png;base64,iVBOR'}..."`,
        data,
      );
    bytes = fromBase64(text.slice(comma + 1));
  } else if (text !== undefined && looksLikePath(text, obj !== undefined)) {
    form = 'path';
    const path = text.startsWith('file://')
      ? fileURLToPath(text)
      : text.startsWith('~/')
        ? `${homedir()}${text.slice(1)}`
        : text;
    source = path;
    const { file, fd } = openAllowedFile(at.input, path, ctx.config.allowedRoots);
    try {
      if (file.size > maxBytes)
        throw tgError(
          'INPUT_TOO_LARGE',
          `${where(at)}: ${path} is ${file.size} bytes, over the ${maxBytes}-byte limit`,
          { ...data, bytes: file.size, limit: maxBytes },
        );
      bytes = readFileHead(fd, Math.min(file.size, READ_WHOLE_UP_TO));
    } finally {
      closeSync(fd);
    }
    if (bytes.byteLength < file.size) {
      checkFile(at, bytes, source);
      return { form, item: { file, what: `${where(at)}: ${path}` } };
    }
  } else if (text !== undefined) {
    form = 'b64';
    source = 'the base64 data';
    bytes = fromBase64(text);
  } else {
    throw tgError(code, `${where(at)}: expected ${inputForms(at.config)}`, data);
  }
  return { form, item: checkFile(at, bytes, source) };
}

/** Refuses what a file's first bytes already show: empty, the wrong kind, a format not taken. */
function checkFile(at: Item, bytes: Uint8Array, source: string): Uint8Array {
  const { config } = at;
  const data = errorData(at);
  if (bytes.byteLength === 0) throw tgError(badCode(config), `${where(at)}: ${source} is empty (0 bytes)`, data);
  if (config.type === 'image') checkImage(at, bytes, source, config);
  else checkAudio(at, bytes, source);
  return bytes;
}

function checkImage(at: Item, bytes: Uint8Array, source: string, image: ImageInputConfig): void {
  const data = errorData(at);
  const format = sniffImage(bytes);
  if (format === undefined)
    throw tgError(
      'BAD_IMAGE',
      `${where(at)}: ${source} is not a PNG, JPEG, WebP, GIF or BMP image (${describeBytes(bytes)})`,
      data,
    );
  if (!(IMAGE_FORMATS as readonly string[]).includes(format) || !image.formats.includes(format as ImageFormat))
    throw tgError(
      'IMAGE_FORMAT_NOT_SUPPORTED',
      `${where(at)}: ${source} is a ${format.toUpperCase()} image; this model takes ${image.formats.map((f) => f.toUpperCase()).join(', ')}. Convert it first (for example to PNG)`,
      { ...data, format, formats: image.formats },
    );
}

function checkAudio(at: Item, bytes: Uint8Array, source: string): void {
  const format = sniffAudio(bytes);
  if (format === 'wav') return;
  if (format !== undefined)
    throw tgError(
      'AUDIO_FORMAT_NOT_SUPPORTED',
      `${where(at)}: ${source} is ${format === 'ogg' ? 'an' : 'a'} ${format.toUpperCase()} file; this model takes WAV. Convert it first (for example: ffmpeg -i in.${format} -c:a pcm_s16le out.wav)`,
      { ...errorData(at), format },
    );
  const image = sniffImage(bytes);
  throw tgError(
    'BAD_AUDIO',
    `${where(at)}: ${source} is not a WAV recording (${image ? `it is a ${image.toUpperCase()} image` : describeBytes(bytes)})`,
    errorData(at),
  );
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

const IMAGE_SIGNATURES: [string, (b: Uint8Array) => boolean][] = [
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

const AUDIO_SIGNATURES: [string, (b: Uint8Array) => boolean][] = [
  ['wav', (b) => (ascii(b, 0, 4) === 'RIFF' || ascii(b, 0, 4) === 'RF64') && ascii(b, 8, 12) === 'WAVE'],
  // An ID3 tag, or an MPEG audio frame sync (11 set bits) with layer III.
  ['mp3', (b) => ascii(b, 0, 3) === 'ID3' || (b[0] === 0xff && ((b[1] ?? 0) & 0xe6) === 0xe2)],
  ['flac', (b) => ascii(b, 0, 4) === 'fLaC'],
  ['ogg', (b) => ascii(b, 0, 4) === 'OggS'],
  ['m4a', (b) => ascii(b, 4, 8) === 'ftyp' && ['M4A ', 'M4B ', 'mp42', 'isom'].includes(ascii(b, 8, 12))],
  ['aiff', (b) => ascii(b, 0, 4) === 'FORM' && ['AIFF', 'AIFC'].includes(ascii(b, 8, 12))],
];

/** The image format the bytes begin with; the bytes decide, not a file's extension. */
export function sniffImage(bytes: Uint8Array): string | undefined {
  return IMAGE_SIGNATURES.find(([, test]) => test(bytes))?.[0];
}

/** The audio container the bytes begin with. */
export function sniffAudio(bytes: Uint8Array): string | undefined {
  return AUDIO_SIGNATURES.find(([, test]) => test(bytes))?.[0];
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
