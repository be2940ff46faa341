import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { ERROR_CODES } from '../../src/errors.js';
import { seededRandom } from '../../src/tensor/seeded-random.js';
import { ensureDigitsModels, ensureTextAudioModels, PYTHON } from '../helpers/models.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * Bounded fuzzing of everything that parses a caller's tensors, on the real server: OIP v2 JSON
 * and binary bodies and shared-memory requests over real HTTP, and MCP `infer` inputs over the
 * official client, and image files, WAV recordings and texts for models with processing (the
 * digits, dtmf and intents demos' own tools).
 * Every malformed input must get a clear client error (4xx, or an MCP error
 * result with a known code that is not INTERNAL), the server must keep serving, and its memory
 * must stay bounded. Seeded: a failure names the case that caused it and repeats.
 * TENSORGATE_FUZZ_CASES sets the cases per surface (400 in CI; thousands for a long run).
 */

const CASES_PER_SURFACE = Number(process.env.TENSORGATE_FUZZ_CASES ?? 400);

/** Small, seeded, good enough to pick cases. */
const rng = seededRandom;

type Pick = <T>(xs: readonly T[]) => T;

/** Stands for a deeply nested array in a request spliced in as text (JSON.stringify would overflow). */
const DEEP_MARKER = '__deep__';

function deepArray(depth: number): unknown {
  let node: unknown = [1];
  for (let i = 0; i < depth; i++) node = [node];
  return node;
}

const WEIRD_NUMBERS = [Number.NaN, 1e308, -1, 0, 2 ** 53 + 1, -(2 ** 31), 1.5, 'x', null, {}, [], true];
const WEIRD_SHAPES: unknown[] = [
  [1, 2],
  [2, 2],
  [-1, 2],
  [1e12, 1e12],
  [2 ** 31, 2 ** 31, 2 ** 31],
  [],
  [0, 2],
  Array.from({ length: 64 }, () => 1),
  Array.from({ length: 10_000 }, () => 1),
  ['1', 2],
  [1.5, 2],
  null,
  'shape',
  [Number.NaN, 2],
];
const DATATYPES = ['FP32', 'FP64', 'INT64', 'BYTES', 'BOOL', 'FP16', 'BF16', 'UINT8', 'fp32', 'COMPLEX', '', 7];

/** One malformed OIP v2 infer request: body and headers. */
function oipCase(r: () => number, pick: Pick): { body: Buffer; headers: Record<string, string> } {
  const tensor = (name: string) => ({
    name,
    shape: pick(WEIRD_SHAPES),
    datatype: pick(DATATYPES),
    data: pick<unknown>([
      [1, 2],
      [1, 2, 3],
      Array.from({ length: 5 }, () => pick(WEIRD_NUMBERS)),
      DEEP_MARKER,
      'AAAA',
      null,
      { a: 1 },
      Array.from({ length: 100_000 }, () => 1),
    ]),
    ...(r() < 0.2 ? { parameters: { binary_data_size: pick<unknown>([-1, 0, 8, 2 ** 40, 'x']) } } : {}),
    ...(r() < 0.1
      ? { parameters: { shared_memory_region: pick(['nope', '', '../x']), shared_memory_byte_size: 8 } }
      : {}),
  });
  const kind = Math.floor(r() * 6);
  const json = JSON.stringify({
    inputs: r() < 0.1 ? pick<unknown>([null, {}, 'x', []]) : [tensor(pick(['a', 'b', 'c', ''])), tensor('b')],
    ...(r() < 0.2
      ? {
          outputs: pick<unknown>([
            [{ name: 'nope' }],
            'x',
            [{}],
            [{ name: 'sum', parameters: { binary_data: 'yes' } }],
          ]),
        }
      : {}),
    ...(r() < 0.1 ? { parameters: pick<unknown>([{ precision: 'fp8' }, { timeout_ms: -5 }, 'x']) } : {}),
  });
  const depth = 1 + Math.floor(r() * 200_000);
  const bytes = Buffer.from(json.replaceAll(`"${DEEP_MARKER}"`, `${'['.repeat(depth)}1${']'.repeat(depth)}`));
  switch (kind) {
    case 0: // truncated JSON
      return {
        body: bytes.subarray(0, Math.floor(r() * bytes.length)),
        headers: { 'content-type': 'application/json' },
      };
    case 1: // invalid UTF-8 spliced in
      return {
        body: Buffer.concat([bytes.subarray(0, 10), Buffer.from([0xff, 0xfe, 0xc3]), bytes.subarray(10)]),
        headers: { 'content-type': 'application/json' },
      };
    case 2: {
      // binary extension with a lying header length
      const lie = pick<unknown>([-1, 0, bytes.length + 100, 'abc', bytes.length - 3, 2 ** 53]);
      return {
        body: Buffer.concat([bytes, Buffer.alloc(Math.floor(r() * 64))]),
        headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(lie) },
      };
    }
    case 3: // random bytes
      return {
        body: Buffer.from(Array.from({ length: Math.floor(r() * 512) }, () => Math.floor(r() * 256))),
        headers: {},
      };
    default:
      return { body: bytes, headers: { 'content-type': 'application/json' } };
  }
}

/** One malformed MCP infer input for the `a` input of the adder. */
function mcpCase(r: () => number, pick: Pick): Record<string, unknown> {
  const value = pick<unknown>([
    deepArray(Math.floor(r() * 3000)),
    [[1, 'two']],
    [[1, 2], [3]],
    { b64: '!!!not base64!!!', shape: [1, 2], dtype: 'float32' },
    {
      b64: Buffer.alloc(8).toString('base64'),
      shape: pick(WEIRD_SHAPES),
      dtype: pick(['float32', 'float64', 'int8', 'complex', 7]),
    },
    { b64: Buffer.alloc(7).toString('base64'), shape: [1, 2], dtype: 'float32' },
    { path: pick(['../../etc/passwd', '/etc/passwd', 'relative.npy', '/nonexistent.npy', '', '/dev/zero']) },
    { handle: pick(['tensor://nope', 'tensor://', 'http://x', '']) },
    'tensor://AAAAAAAAAAAA',
    { shape: [1, 2] },
    null,
    42,
    [[Number.MAX_VALUE, -Number.MAX_VALUE]],
  ]);
  const inputs: Record<string, unknown> = { a: value, b: [[1, 2]] };
  if (r() < 0.2) inputs[pick(['c', '', '__proto__', 'constructor'])] = [[1, 2]];
  if (r() < 0.1) delete inputs.b;
  return {
    model: pick(['adder', 'adder', 'nope', '']),
    inputs,
    ...(r() < 0.1 ? { version: pick(['9', '-1', 'x']) } : {}),
  };
}

/** A tool call's outcome: "ok", the error code of an error result, or SCHEMA when the SDK refused the arguments. */
async function outcome(client: Client, name: string, args: Record<string, unknown>): Promise<string> {
  try {
    const result = await client.callTool({ name, arguments: args });
    const text = (result.content as { text?: string }[])[0]?.text ?? '';
    if (!result.isError) return 'ok';
    // The SDK answers arguments that break the tool's input schema with an error result.
    if (text.startsWith('Input validation error')) return 'SCHEMA';
    return /^([A-Z_]+):/.exec(text)?.[1] ?? `unparsed: ${text.slice(0, 200)}`;
  } catch (err) {
    // The SDK refuses arguments that break the tool's input schema before calling it.
    return /Input validation error|-32602|Invalid/.test(String(err)) ? 'SCHEMA' : `threw: ${String(err).slice(0, 200)}`;
  }
}

/** What a model with processing may answer for a mangled image: never a crash or an inference failure. */
const IMAGE_CODES = new Set([
  'ok',
  'SCHEMA',
  'BAD_IMAGE',
  'IMAGE_FORMAT_NOT_SUPPORTED',
  'IMAGE_TOO_LARGE',
  'INPUT_TOO_LARGE',
  'PATH_NOT_ALLOWED',
  'FILE_NOT_FOUND',
]);

/** What a model with processing may answer for a mangled recording or text. */
const AUDIO_CODES = new Set([
  'ok',
  'SCHEMA',
  'BAD_AUDIO',
  'AUDIO_FORMAT_NOT_SUPPORTED',
  'AUDIO_TOO_LONG',
  'INPUT_TOO_LARGE',
  'PATH_NOT_ALLOWED',
  'FILE_NOT_FOUND',
]);
const TEXT_CODES = new Set(['ok', 'SCHEMA', 'BAD_TEXT', 'TEXT_TOO_LONG']);

/** One mangled file: real files of each format with bytes flipped, cut or spliced. */
function fileCase(r: () => number, pick: Pick, seeds: Buffer[]): Buffer {
  const seed = pick(seeds);
  const bytes = Buffer.from(seed);
  switch (Math.floor(r() * 7)) {
    case 0: // truncated anywhere, headers included
      return bytes.subarray(0, Math.floor(r() * bytes.length));
    case 1: // bytes flipped
      for (let i = 0, n = 1 + Math.floor(r() * 16); i < n; i++)
        bytes[Math.floor(r() * bytes.length)] = Math.floor(r() * 256);
      return bytes;
    case 2: // a run of garbage over the header (dimensions, chunk lengths, palette sizes)
      for (let i = 8; i < Math.min(bytes.length, 8 + Math.floor(r() * 40)); i++) bytes[i] = Math.floor(r() * 256);
      return bytes;
    case 3: // one format's magic, then random bytes
      return Buffer.concat([
        pick(seeds).subarray(0, 12),
        Buffer.from(Array.from({ length: Math.floor(r() * 300) }, () => Math.floor(r() * 256))),
      ]);
    case 4: // two files glued together
      return Buffer.concat([bytes, pick(seeds)]);
    case 5: // nothing, or text
      return pick([Buffer.alloc(0), Buffer.from('not a file'), Buffer.from('<svg></svg>'), Buffer.from('%PDF-1.7')]);
    default:
      return bytes;
  }
}

describe('fuzzing the parsers (bounded)', { timeout: 600_000 }, () => {
  let served: Served;

  before(async () => {
    served = await serveOne('adder', {
      prepare: (models) => {
        cpSync(join(ensureDigitsModels(), 'digits'), join(models, 'digits'), { recursive: true });
        for (const model of ['dtmf', 'intents'])
          cpSync(join(ensureTextAudioModels(), model), join(models, model), { recursive: true });
      },
    });
  });

  after(async () => {
    await served?.stop();
  });

  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${served.child.pid}/status`, 'utf8'))?.[1]) * 1024;

  it(`answers ${CASES_PER_SURFACE} malformed OIP v2 requests with client errors and keeps serving`, async () => {
    const r = rng(7);
    const pick: Pick = (xs) => xs[Math.floor(r() * xs.length)] as (typeof xs)[number];
    const statuses = new Map<number, number>();
    for (let i = 0; i < CASES_PER_SURFACE; i++) {
      const { body, headers } = oipCase(r, pick);
      const path = pick(['/v2/models/adder/infer', '/v2/models/adder/versions/1/infer', '/v2/models/nope/infer']);
      const res = await fetch(`${served.base}${path}`, { method: 'POST', body: new Uint8Array(body), headers });
      const text = await res.text();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      assert.ok(res.status >= 400 && res.status < 500, `case ${i}: HTTP ${res.status} ${text.slice(0, 300)}`);
      const code = /^"?([A-Z_]+):/.exec((JSON.parse(text) as { error: string }).error)?.[1];
      assert.ok(code && code in ERROR_CODES && code !== 'INTERNAL', `case ${i}: ${text.slice(0, 300)}`);
    }
    assert.equal((await fetch(`${served.base}/v2/health/ready`)).status, 200);
    process.stderr.write(`oip fuzz statuses: ${JSON.stringify(Object.fromEntries(statuses))}\n`);
  });

  it('answers malformed shared-memory registrations and references with client errors', async () => {
    const r = rng(13);
    const pick: Pick = (xs) => xs[Math.floor(r() * xs.length)] as (typeof xs)[number];
    const real = `/tg_fuzz_${process.pid}`;
    writeFileSync(`/dev/shm${real}`, Buffer.alloc(64));
    try {
      const post = (path: string, body: unknown) =>
        fetch(`${served.base}${path}`, {
          method: 'POST',
          body: JSON.stringify(body),
          headers: { 'content-type': 'application/json' },
        });
      for (let i = 0; i < CASES_PER_SURFACE / 4; i++) {
        const name = pick(['r', 'r', 'other', '', '../x', 'a'.repeat(300)]);
        const reg = await post(`/v2/systemsharedmemory/region/${encodeURIComponent(name)}/register`, {
          key: pick<unknown>([real, real, '/nonexistent', '../../etc/passwd', '/dev/zero', '', 'x'.repeat(300), 7]),
          byte_size: pick<unknown>([64, 16, 0, -1, 2 ** 53, 'x', 1e12]),
          ...(r() < 0.5 ? { offset: pick<unknown>([0, 8, 63, 64, -1, 2 ** 40, 'x']) } : {}),
        });
        const regText = await reg.text();
        assert.ok(
          reg.status === 200 || (reg.status >= 400 && reg.status < 500),
          `register ${i}: ${reg.status} ${regText}`,
        );
        const res = await post('/v2/models/adder/infer', {
          inputs: ['a', 'b'].map((input) => ({
            name: input,
            shape: [1, 2],
            datatype: 'FP32',
            parameters: {
              shared_memory_region: pick(['r', 'other', 'nope']),
              shared_memory_byte_size: pick<unknown>([8, 4, 64, 0, -8, 2 ** 40, 'x']),
              ...(r() < 0.5 ? { shared_memory_offset: pick<unknown>([0, 56, 60, 64, -8, 2 ** 40]) } : {}),
            },
          })),
        });
        const text = await res.text();
        assert.ok(res.status === 200 || (res.status >= 400 && res.status < 500), `infer ${i}: ${res.status} ${text}`);
        if (r() < 0.3) await post(`/v2/systemsharedmemory/region/${encodeURIComponent(name)}/unregister`, {});
      }
      assert.equal((await fetch(`${served.base}/v2/health/ready`)).status, 200);
    } finally {
      rmSync(`/dev/shm${real}`, { force: true });
    }
  });

  it(`answers ${CASES_PER_SURFACE} malformed MCP infer calls with error results and keeps serving`, async () => {
    const r = rng(11);
    const pick: Pick = (xs) => xs[Math.floor(r() * xs.length)] as (typeof xs)[number];
    const client = new Client({ name: 'fuzz', version: '0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(served.url)));
    const codes = new Map<string, number>();
    const rssBefore = rss();
    for (let i = 0; i < CASES_PER_SURFACE; i++) {
      const args = mcpCase(r, pick);
      const code = await outcome(client, 'infer', args);
      codes.set(code, (codes.get(code) ?? 0) + 1);
      assert.ok(
        code === 'ok' || code === 'SCHEMA' || (code in ERROR_CODES && code !== 'INTERNAL'),
        `case ${i} ${JSON.stringify(args).slice(0, 300)}: ${code}`,
      );
    }
    const ok = await client.callTool({
      name: 'infer',
      arguments: { model: 'adder', inputs: { a: [[1, 2]], b: [[3, 4]] } },
    });
    assert.equal(ok.isError, undefined, 'a good call after the fuzz still works');
    await client.close();
    const grown = rss() - rssBefore;
    process.stderr.write(
      `mcp fuzz codes: ${JSON.stringify(Object.fromEntries(codes))}; server RSS grew ${Math.round(grown / 2 ** 20)} MiB\n`,
    );
    assert.ok(grown < 256 * 2 ** 20, `server RSS grew ${grown} bytes`);
  });

  it(`answers ${CASES_PER_SURFACE / 2} mangled image files with image errors and keeps serving`, async () => {
    const r = rng(17);
    const pick: Pick = (xs) => xs[Math.floor(r() * xs.length)] as (typeof xs)[number];
    const dir = join(served.work, 'fuzz-images');
    mkdirSync(dir);
    const png = join(dir, 'digit.png'); // under the server's allowed root
    cpSync(join(ensureDigitsModels(), 'digits', 'examples', 'digit-000.png'), png);
    const seeds = [readFileSync(png)];
    for (const format of ['JPEG', 'GIF', 'WEBP', 'BMP']) {
      const out = join(dir, `seed.${format.toLowerCase()}`);
      execFileSync(PYTHON, [
        '-c',
        `from PIL import Image\nImage.open(${JSON.stringify(png)}).convert("RGB").save(${JSON.stringify(out)}, ${JSON.stringify(format)})`,
      ]);
      seeds.push(readFileSync(out));
    }
    const client = new Client({ name: 'fuzz-images', version: '0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(served.url)));
    const codes = new Map<string, number>();
    for (let i = 0; i < CASES_PER_SURFACE / 2; i++) {
      const bytes = fileCase(r, pick, seeds);
      const file = join(dir, `case-${i}.${pick(['png', 'jpg', 'gif', 'bin'])}`);
      writeFileSync(file, bytes);
      const form = Math.floor(r() * 3);
      const image =
        form === 0 ? file : form === 1 ? bytes.toString('base64') : `data:image/png;base64,${bytes.toString('base64')}`;
      const code = await outcome(client, 'digits', { image: r() < 0.1 ? [image, png] : image });
      codes.set(code, (codes.get(code) ?? 0) + 1);
      assert.ok(IMAGE_CODES.has(code), `case ${i} (${bytes.length} bytes, form ${form}): ${code}`);
    }
    const ok = await client.callTool({ name: 'digits', arguments: { image: png } });
    assert.equal(ok.isError, undefined, 'a good image after the fuzz is still read');
    await client.close();
    assert.doesNotMatch(served.stderr(), /crashed/, 'the worker never crashed');
    process.stderr.write(`image fuzz codes: ${JSON.stringify(Object.fromEntries(codes))}\n`);
  });
  it(`answers ${CASES_PER_SURFACE / 2} mangled WAV files with audio errors and keeps serving`, async () => {
    const r = rng(19);
    const pick: Pick = (xs) => xs[Math.floor(r() * xs.length)] as (typeof xs)[number];
    const dir = join(served.work, 'fuzz-audio');
    mkdirSync(dir);
    const examples = join(ensureTextAudioModels(), 'dtmf', 'examples');
    const wavs = Object.keys(JSON.parse(readFileSync(join(examples, 'labels.json'), 'utf8')));
    const good = join(dir, 'good.wav'); // under the server's allowed root
    cpSync(join(examples, wavs[0] as string), good);
    // Recordings at several rates, widths and channel counts: every header field gets mangled.
    const seeds = wavs.slice(0, 6).map((name) => readFileSync(join(examples, name)));
    const client = new Client({ name: 'fuzz-audio', version: '0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(served.url)));
    const codes = new Map<string, number>();
    for (let i = 0; i < CASES_PER_SURFACE / 2; i++) {
      const bytes = fileCase(r, pick, seeds);
      const file = join(dir, `case-${i}.wav`);
      writeFileSync(file, bytes);
      const audio = r() < 0.5 ? file : `data:audio/wav;base64,${bytes.toString('base64')}`;
      const code = await outcome(client, 'dtmf', { audio: r() < 0.1 ? [audio, good] : audio });
      codes.set(code, (codes.get(code) ?? 0) + 1);
      assert.ok(AUDIO_CODES.has(code), `case ${i} (${bytes.length} bytes): ${code}`);
    }
    const ok = await client.callTool({ name: 'dtmf', arguments: { audio: good } });
    assert.equal(ok.isError, undefined, 'a good recording after the fuzz is still read');
    await client.close();
    assert.doesNotMatch(served.stderr(), /crashed/, 'the worker never crashed');
    process.stderr.write(`audio fuzz codes: ${JSON.stringify(Object.fromEntries(codes))}\n`);
  });

  it(`answers ${CASES_PER_SURFACE / 4} odd texts over MCP and OIP v2 BYTES and keeps serving`, async () => {
    const r = rng(23);
    const pick: Pick = (xs) => xs[Math.floor(r() * xs.length)] as (typeof xs)[number];
    const client = new Client({ name: 'fuzz-text', version: '0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(served.url)));
    const odd = () =>
      pick<unknown>([
        '',
        ' ',
        'x'.repeat(Math.floor(r() * 20_000)),
        '\u0000\u0001 control',
        '\ud800 lone surrogate',
        '🙂'.repeat(50),
        'مرحبا שלום 你好',
        7,
        null,
        ['a', 'b'],
        [['nested']],
        [],
        { text: 'x' },
        String.fromCharCode(...Array.from({ length: 64 }, () => Math.floor(r() * 0xffff))),
      ]);
    const codes = new Map<string, number>();
    for (let i = 0; i < CASES_PER_SURFACE / 4; i++) {
      const text = odd();
      // Through the model's tool (its schema refuses non-strings) and the generic infer (any JSON).
      const code =
        r() < 0.5
          ? await outcome(client, 'intents', { text })
          : await outcome(client, 'infer', { model: 'intents', inputs: { text } });
      codes.set(code, (codes.get(code) ?? 0) + 1);
      assert.ok(TEXT_CODES.has(code), `case ${i} ${JSON.stringify(text)?.slice(0, 100)}: ${code}`);
      // The same as OIP v2 binary BYTES: random bytes, often not UTF-8, and lying length prefixes.
      const items = Array.from({ length: 1 + Math.floor(r() * 3) }, () =>
        Buffer.from(Array.from({ length: Math.floor(r() * 40) }, () => Math.floor(r() * 256))),
      );
      let data = Buffer.concat(items.flatMap((b) => [Buffer.from(new Uint32Array([b.length]).buffer), b]));
      if (r() < 0.3) data = data.subarray(0, Math.floor(r() * data.length));
      if (r() < 0.2) data.writeUInt32LE(Math.floor(r() * 2 ** 32), 0);
      const header = JSON.stringify({
        inputs: [
          { name: 'text', shape: [items.length], datatype: 'BYTES', parameters: { binary_data_size: data.length } },
        ],
      });
      const res = await fetch(`${served.base}/v2/models/intents/infer`, {
        method: 'POST',
        body: new Uint8Array(Buffer.concat([Buffer.from(header), data])),
        headers: { 'inference-header-content-length': String(Buffer.byteLength(header)) },
      });
      const body = await res.text();
      assert.ok(res.status === 200 || (res.status >= 400 && res.status < 500), `oip ${i}: ${res.status} ${body}`);
    }
    const ok = await client.callTool({ name: 'intents', arguments: { text: 'set an alarm for seven' } });
    assert.equal(ok.isError, undefined, 'a good text after the fuzz is still told');
    await client.close();
    process.stderr.write(`text fuzz codes: ${JSON.stringify(Object.fromEntries(codes))}\n`);
  });
});
