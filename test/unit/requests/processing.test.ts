import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseModelConfig } from '../../../src/registry/model-config.js';
import { classify } from '../../../src/requests/classify.js';
import {
  decodeProcessedInputs,
  preparedProcessedInputs,
  sniffAudio,
  sniffImage,
} from '../../../src/requests/decode-processed.js';
import { embedRows } from '../../../src/requests/embed.js';
import { joinRequests, splitResponse } from '../../../src/scheduler/batch.js';
import { bytesSource, splitBytes } from '../../../src/tensor/bytes-tensor.js';
import type { TensorSource } from '../../../src/tensor/source.js';
import { TensorStore } from '../../../src/tensor/store.js';
import { makeTensor } from '../../../src/tensor/tensor.js';

// A PNG's signature and the start of its header chunk, padded to a size real files exceed.
const PNG_HEAD = Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]),
  Buffer.alloc(52),
]);
const item = (text: string) => new Uint8Array(Buffer.from(text));
/** The bytes a source writes into its arena slot. */
function filled(source: TensorSource): Buffer {
  const out = Buffer.alloc(source.byteLength);
  source.fill(out);
  return out;
}

test('BYTES tensors serialise items with 4-byte little-endian lengths and split back', () => {
  const items = [item('first'), item(''), item('third item')];
  const source = bytesSource(items);
  assert.equal(source.bytes, true);
  assert.deepEqual(source.shape, [3]);
  assert.equal(source.byteLength, 3 * 4 + 5 + 0 + 10);
  const data = filled(source);
  assert.equal(Buffer.from(data).readUInt32LE(0), 5);
  assert.deepEqual(
    splitBytes(data, 3).map((b) => Buffer.from(b).toString()),
    ['first', '', 'third item'],
  );
  assert.throws(() => splitBytes(data, 2), /2 bytes? after its last item|holds 2 items|after its last item/);
  assert.throws(() => splitBytes(data.subarray(0, 7)), {
    code: 'BAD_TENSOR',
    message: /length prefix says 5 bytes but 3 are left/,
  });
  assert.throws(() => splitBytes(data.subarray(0, 2)), /ends inside its 4-byte length/);
});

test('batched requests join BYTES inputs into one BYTES tensor of all their items, in order', () => {
  const request = (texts: string[]) => ({
    inputs: [{ name: 'image', tensor: bytesSource(texts.map(item)) }],
    precision: 'fp32' as const,
  });
  const joined = joinRequests([request(['a', 'bb']), request(['ccc'])]).inputs[0]?.tensor;
  assert.ok(joined);
  assert.equal(joined.bytes, true);
  assert.deepEqual(joined.shape, [3]);
  assert.deepEqual(
    splitBytes(filled(joined), 3).map((b) => Buffer.from(b).toString()),
    ['a', 'bb', 'ccc'],
  );
});

test('image formats are told by their bytes, not their names', () => {
  assert.equal(sniffImage(PNG_HEAD), 'png');
  assert.equal(sniffImage(Buffer.from([0xff, 0xd8, 0xff, 0xe0])), 'jpeg');
  assert.equal(sniffImage(Buffer.from('GIF89a')), 'gif');
  assert.equal(sniffImage(Buffer.from('RIFF\0\0\0\0WEBPVP8 ')), 'webp');
  assert.equal(sniffImage(Buffer.from('BM\0\0')), 'bmp');
  assert.equal(sniffImage(Buffer.from('II*\0')), 'tiff');
  assert.equal(sniffImage(Buffer.from('\0\0\0\x18ftypheic')), 'heic');
  assert.equal(sniffImage(Buffer.from('hello')), undefined);
});

test('processed inputs are read from files, data: URIs and base64, and refused with codes', () => {
  const root = mkdtempSync(join(tmpdir(), 'tg-img-'));
  const png = join(root, 'a.png');
  writeFileSync(png, PNG_HEAD);
  const config = parseModelConfig(
    {
      name: 'digits',
      inputs: [{ name: 'image', dtype: 'float32', shape: [-1, 1, 8, 8] }],
      outputs: [{ name: 'logits', dtype: 'float32', shape: [-1, 10] }],
      versions: { '1': { format: 'export', file: 'm.pt2' } },
      processing: { inputs: { image: { type: 'image', mode: 'L', resize: { size: [8, 8] }, formats: ['png'] } } },
    },
    'test',
  );
  const ctx = {
    config: { allowedRoots: [root], maxArrayElements: 10, maxInputBytes: 100 },
    store: new TensorStore(1024, 1000),
  };
  const b64 = PNG_HEAD.toString('base64');
  for (const value of [png, { path: png }, `data:image/png;base64,${b64}`, b64, { b64 }, [png, b64]]) {
    const [decoded] = decodeProcessedInputs(config, { image: value }, ctx);
    assert.ok(decoded?.tensor.bytes);
    const items = splitBytes(filled(decoded.tensor));
    assert.equal(items.length, Array.isArray(value) ? 2 : 1);
    for (const i of items) assert.deepEqual(Buffer.from(i), PNG_HEAD);
  }
  const code = (value: unknown, expected: string, message?: RegExp) =>
    assert.throws(() => decodeProcessedInputs(config, { image: value }, ctx), {
      code: expected,
      ...(message ? { message } : {}),
    });
  const jpeg = join(root, 'b.jpg');
  writeFileSync(jpeg, Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0]));
  code(jpeg, 'IMAGE_FORMAT_NOT_SUPPORTED', /is a JPEG image; this model takes PNG/);
  const big = join(root, 'big.png');
  writeFileSync(big, Buffer.concat([PNG_HEAD, Buffer.alloc(100)]));
  code(big, 'INPUT_TOO_LARGE', /over the 100-byte limit/);
  code(Buffer.alloc(120).toString('base64'), 'INPUT_TOO_LARGE');
  code('%%%not base64 and not a path%%%', 'PATH_NOT_ALLOWED', /not absolute/);
  code({ b64: 'a$b=' }, 'BAD_IMAGE', /not valid base64/);
  code(42, 'BAD_IMAGE', /expected an image/);
  assert.throws(() => decodeProcessedInputs(config, {}, ctx), { code: 'MISSING_INPUT' });
  assert.throws(() => decodeProcessedInputs(config, { image: png, extra: 1 }, ctx), { code: 'UNKNOWN_INPUT' });
});

test('a large file given by path stays where it is until its slot is known, after its first bytes are checked', () => {
  const root = mkdtempSync(join(tmpdir(), 'tg-img-'));
  const config = parseModelConfig(
    {
      name: 'photos',
      inputs: [{ name: 'image', dtype: 'float32', shape: [-1, 3, 8, 8] }],
      outputs: [{ name: 'logits', dtype: 'float32', shape: [-1, 10] }],
      versions: { '1': { format: 'export', file: 'm.pt2' } },
      processing: { inputs: { image: { type: 'image', resize: { size: [8, 8] }, formats: ['png'] } } },
    },
    'test',
  );
  const ctx = {
    config: { allowedRoots: [root], maxArrayElements: 10, maxInputBytes: 1 << 20 },
    store: new TensorStore(1024, 1000),
  };
  const photo = join(root, 'photo.png');
  const bytes = Buffer.concat([PNG_HEAD, Buffer.alloc(200_000, 7)]);
  writeFileSync(photo, bytes);
  const small = join(root, 'small.png');
  writeFileSync(small, PNG_HEAD);
  const [decoded] = decodeProcessedInputs(config, { image: [photo, small] }, ctx);
  const tensor = decoded?.tensor as TensorSource;
  // Each item's length, then its bytes: the large file by a span the worker may read itself.
  assert.deepEqual(
    tensor.parts?.map((p) => [p.byteLength, p.file?.path, p.file?.open !== undefined, p.file?.what]),
    [
      [4, undefined, false, undefined],
      [bytes.byteLength, photo, true, `input "image" item 0: ${photo}`],
      [4, undefined, false, undefined],
      [PNG_HEAD.byteLength, undefined, false, undefined],
    ],
  );
  // Filled by the gateway (engines that read nothing themselves), the same bytes.
  assert.deepEqual(
    splitBytes(filled(tensor), 2).map((i) => Buffer.from(i)),
    [bytes, PNG_HEAD],
  );
  const notImage = join(root, 'notes.png');
  writeFileSync(notImage, Buffer.alloc(200_000, 0x41));
  assert.throws(() => decodeProcessedInputs(config, { image: notImage }, ctx), {
    code: 'BAD_IMAGE',
    message: /notes.png is not a PNG, JPEG, WebP, GIF or BMP image \(it begins with text: "AAAA/,
  });
});

test('audio containers are told by their bytes; only WAV is decoded', () => {
  assert.equal(sniffAudio(Buffer.from('RIFF\0\0\0\0WAVEfmt ')), 'wav');
  assert.equal(sniffAudio(Buffer.from('ID3\x04\0')), 'mp3');
  assert.equal(sniffAudio(Buffer.from([0xff, 0xfb, 0x90, 0x64])), 'mp3');
  assert.equal(sniffAudio(Buffer.from('fLaC\0')), 'flac');
  assert.equal(sniffAudio(Buffer.from('OggS\0')), 'ogg');
  assert.equal(sniffAudio(Buffer.from('RIFF\0\0\0\0WEBPVP8 ')), undefined);
});

function multiModal() {
  return parseModelConfig(
    {
      name: 'multi',
      inputs: [
        { name: 'input_ids', dtype: 'int64', shape: [-1, -1] },
        { name: 'attention_mask', dtype: 'int64', shape: [-1, -1] },
        { name: 'waveform', dtype: 'float32', shape: [-1, 4000] },
      ],
      outputs: [{ name: 'logits', dtype: 'float32', shape: [-1, 3] }],
      versions: { '1': { format: 'export', file: 'm.pt2' } },
      processing: {
        inputs: {
          text: { type: 'text' },
          audio: { type: 'audio', tensor: 'waveform', sample_rate: 8000, length: 4000 },
        },
      },
    },
    'test',
  );
}

test('texts travel as their UTF-8 and recordings as WAV files, each refused with its own codes', () => {
  const root = mkdtempSync(join(tmpdir(), 'tg-audio-'));
  const wav = join(root, 'tone.wav');
  const WAV_HEAD = Buffer.concat([Buffer.from('RIFF\0\0\0\0WAVEfmt '), Buffer.alloc(40)]);
  writeFileSync(wav, WAV_HEAD);
  const mp3 = join(root, 'song.mp3');
  writeFileSync(mp3, Buffer.from('ID3\x04\0\0\0\0\0\0'));
  const ctx = {
    config: { allowedRoots: [root], maxArrayElements: 10, maxInputBytes: 1000 },
    store: new TensorStore(1024, 1000),
  };
  const config = multiModal();
  const decoded = decodeProcessedInputs(config, { text: ['héllo', ''], audio: wav }, ctx);
  const text = decoded.find((d) => d.name === 'text');
  assert.equal(text?.form, 'text');
  assert.deepEqual(
    splitBytes(filled(text?.tensor as TensorSource)).map((b) => Buffer.from(b).toString('utf8')),
    ['héllo', ''],
  );
  const audio = decoded.find((d) => d.name === 'audio');
  assert.deepEqual(splitBytes(filled(audio?.tensor as TensorSource)).map(Buffer.from), [WAV_HEAD]);
  const code = (inputs: Record<string, unknown>, expected: string, message: RegExp) =>
    assert.throws(() => decodeProcessedInputs(config, { text: 'hi', audio: wav, ...inputs }, ctx), {
      code: expected,
      message,
    });
  code({ text: ['ok', 7] }, 'BAD_TEXT', /input "text" item 1: expected a string of text, got number/);
  code({ text: [] }, 'BAD_TEXT', /empty list/);
  code({ audio: mp3 }, 'AUDIO_FORMAT_NOT_SUPPORTED', /is a MP3 file; this model takes WAV. Convert it first/);
  code({ audio: PNG_HEAD.toString('base64') }, 'BAD_AUDIO', /is not a WAV recording \(it is a PNG image\)/);
  code({ audio: '' }, 'BAD_AUDIO', /empty string/);
  code({ audio: 'data:audio/wav,raw' }, 'BAD_AUDIO', /data:audio\/wav;base64/);
  code(
    { audio: 'tensor://abc' },
    'BAD_AUDIO',
    /input "audio": a tensor handle holds a tensor, not a WAV file; pass the recording as an absolute path/,
  );
  code({ audio: { handle: 'abc' } }, 'BAD_AUDIO', /a tensor handle holds a tensor, not a WAV file/);
});

test('OIP BYTES elements for a text input must be UTF-8', () => {
  const ctx = {
    config: { allowedRoots: [], maxArrayElements: 10, maxInputBytes: 1000 },
    store: new TensorStore(1024, 1000),
  };
  const wav = new Uint8Array(Buffer.concat([Buffer.from('RIFF\0\0\0\0WAVEfmt '), Buffer.alloc(8)]));
  const inputs = (text: Uint8Array[]) =>
    new Map([
      ['text', bytesSource(text)],
      ['audio', bytesSource([wav])],
    ]);
  const ok = preparedProcessedInputs(multiModal(), inputs([item('naïve'), item('ok')]), 'binary', ctx);
  assert.equal(ok.length, 2);
  assert.throws(
    () => preparedProcessedInputs(multiModal(), inputs([item('ok'), new Uint8Array([0x63, 0xe9])]), 'binary', ctx),
    {
      code: 'BAD_TEXT',
      message: /input "text" item 1: the BYTES element is not valid UTF-8 \(2 bytes beginning 63e9\)/,
    },
  );
});

test('classification answers: softmax top-k with labels, sigmoid for independent labels, thresholds', () => {
  const scores = makeTensor('float32', [2, 3], new Uint8Array(new Float32Array([0, 2, 1, 5, 0, 0]).buffer));
  const labels = ['cat', 'dog', 'fox'];
  const config = { type: 'classification' as const, activation: 'softmax' as const, top_k: 2 };
  const [first, second] = classify(scores, labels, config);
  assert.deepEqual(
    first?.map((p) => p.label),
    ['dog', 'fox'],
  );
  const e = [1, Math.exp(2), Math.exp(1)];
  const sum = e.reduce((a, b) => a + b);
  assert.ok(Math.abs((first?.[0]?.score ?? 0) - (e[1] as number) / sum) < 1e-3);
  assert.equal(second?.[0]?.label, 'cat');
  assert.equal(classify(scores, labels, config, { topK: 3 })[0]?.length, 3);
  const sigmoid = classify(scores, labels, { ...config, activation: 'sigmoid', threshold: 0.6 }, { topK: 3 });
  assert.deepEqual(
    sigmoid[0]?.map((p) => p.label),
    ['dog', 'fox'],
    'sigmoid(2)=0.88 and sigmoid(1)=0.73 pass 0.6; sigmoid(0)=0.5 does not',
  );
  assert.deepEqual(classify(scores, undefined, { ...config, activation: 'none' })[1]?.[0], {
    label: '0',
    score: 5,
    index: 0,
  });
});

test('embeddings: row norms, and unit rows when normalised (a zero row stays zero)', () => {
  const vectors = makeTensor('float32', [3, 2], new Uint8Array(new Float32Array([3, 4, 0, 0, -1, 0]).buffer));
  const kept = embedRows(vectors, false);
  assert.deepEqual(kept.norms, [5, 0, 1]);
  assert.equal(kept.tensor, vectors);
  const unit = embedRows(vectors, true);
  assert.deepEqual(unit.tensor.shape, [3, 2]);
  assert.deepEqual(
    [...new Float32Array(unit.tensor.data.slice().buffer)],
    [0.6000000238418579, 0.800000011920929, 0, 0, -1, 0],
  );
});

test("a batched response's handler answers are split by rows with its outputs", () => {
  const timings = { fillMs: 0, transferMs: 0, computeMs: 0 };
  const outputs = [{ name: 'y', tensor: makeTensor('uint8', [3, 1], new Uint8Array([1, 2, 3])) }];
  const parts = splitResponse({ outputs, answers: ['a', 'b', 'c'], timings }, [2, 1]);
  assert.deepEqual(
    parts.map((p) => p.answers),
    [['a', 'b'], ['c']],
  );
  assert.throws(() => splitResponse({ outputs, answers: ['a'], timings }, [2, 1]), { code: 'HANDLER_FAILED' });
});

test('a tensor:// handle of pictures becomes one PNG item per picture, in any layout', () => {
  const config = parseModelConfig(
    {
      name: 'photos',
      inputs: [{ name: 'image', dtype: 'float32', shape: [-1, 3, 8, 8] }],
      outputs: [{ name: 'logits', dtype: 'float32', shape: [-1, 10] }],
      versions: { '1': { format: 'export', file: 'm.pt2' } },
      processing: { inputs: { image: { type: 'image', resize: { size: [8, 8] }, max_pixels: 64 } } },
    },
    'test',
  );
  const store = new TensorStore(1 << 20, 60_000);
  const ctx = { config: { allowedRoots: [], maxArrayElements: 10, maxInputBytes: 1000 }, store };
  const put = (dtype: 'uint8' | 'float32' | 'int64', shape: number[]) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const data =
      dtype === 'float32'
        ? new Uint8Array(new Float32Array(n).fill(0.5).buffer)
        : dtype === 'int64'
          ? new Uint8Array(n * 8)
          : new Uint8Array(n).fill(200);
    return store.put(makeTensor(dtype, shape, data), 'test').uri;
  };
  /** PNG width, height and colour type (0 gray, 2 RGB, 6 RGBA) of each item. */
  const pngs = (value: unknown) => {
    const [decoded] = decodeProcessedInputs(config, { image: value }, ctx);
    assert.equal(decoded?.form, 'handle');
    return splitBytes(filled(decoded?.tensor as TensorSource)).map((png) => {
      const b = Buffer.from(png);
      assert.equal(b.subarray(1, 4).toString(), 'PNG');
      return [b.readUInt32BE(16), b.readUInt32BE(20), b[25]];
    });
  };
  assert.deepEqual(pngs(put('uint8', [2, 8, 6, 3])), [
    [6, 8, 2],
    [6, 8, 2],
  ]);
  assert.deepEqual(pngs({ handle: put('float32', [3, 4, 5]) }), [[5, 4, 2]]);
  assert.deepEqual(pngs(put('float32', [4, 5, 4])), [[5, 4, 6]]);
  assert.deepEqual(pngs([put('uint8', [7, 7]), put('float32', [1, 1, 2, 2])]), [
    [7, 7, 0],
    [2, 2, 0],
  ]);
  assert.throws(() => decodeProcessedInputs(config, { image: put('int64', [1, 3, 2, 2]) }, ctx), {
    code: 'BAD_IMAGE',
    message: /is int64\[1, 3, 2, 2\], not pictures/,
  });
  assert.throws(() => decodeProcessedInputs(config, { image: put('uint8', [5, 5, 5]) }, ctx), {
    code: 'BAD_IMAGE',
    message: /uint8\[5, 5, 5\], not pictures: .*1, 3 or 4 channels/,
  });
  assert.throws(() => decodeProcessedInputs(config, { image: put('uint8', [9, 9]) }, ctx), {
    code: 'IMAGE_TOO_LARGE',
    message: /pictures of 81 pixels, over this input's limit of 64/,
  });
});
