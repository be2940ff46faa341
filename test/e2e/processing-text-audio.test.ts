import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Client } from '@modelcontextprotocol/client';
import { parquetWriteFile } from 'hyparquet-writer';
import { decodeNpy } from '../../src/tensor/npy.js';
import { toNumbers } from '../../src/tensor/tensor.js';
import { type Connected, connect } from '../helpers/mcp.js';
import { ensureTextAudioModels, PYTHON, ROOT } from '../helpers/models.js';

/**
 * Text and WAV recordings through models with processing, end to end: the real CLI over stdio,
 * the official MCP client, real torch workers tokenizing with the model's own tokenizer.json and
 * decoding real WAV files. The demo models must answer held-out sentences and recordings (at
 * other rates, in stereo, at other bit depths) right; bad input must get its code while the
 * server serves on.
 */

interface ToolResult {
  isError?: boolean;
  content: { type: string; text?: string }[];
  structuredContent?: Record<string, unknown>;
}

interface Answer {
  predictions: { label: string; score: number; index: number }[][];
  batch_size: number;
  timings: Record<string, number>;
}

const models = ensureTextAudioModels();
const sentences = (
  JSON.parse(readFileSync(join(models, 'intents', 'examples.json'), 'utf8')) as {
    sentences: { text: string; intent: string }[];
  }
).sentences;
const recordings = join(models, 'dtmf', 'examples');
const keys = JSON.parse(readFileSync(join(recordings, 'labels.json'), 'utf8')) as Record<string, string>;
const wavs = Object.keys(keys);

async function tool(client: Client, name: string, args: Record<string, unknown>): Promise<ToolResult> {
  return (await client.callTool({ name, arguments: args })) as ToolResult;
}

async function answer(client: Client, name: string, args: Record<string, unknown>): Promise<Answer> {
  const result = await tool(client, name, args);
  assert.notEqual(result.isError, true, `${name} failed: ${result.content[0]?.text}`);
  return result.structuredContent as unknown as Answer;
}

async function refused(client: Client, name: string, args: Record<string, unknown>, code: string, hint: RegExp) {
  const result = await tool(client, name, args);
  const text = result.content[0]?.text ?? '';
  assert.equal(result.isError, true, `expected ${code}, got: ${text}`);
  assert.match(text, new RegExp(`^${code}: `), text);
  assert.match(text, hint);
}

/** A WAV file's bytes written by Python's own wave module, from the samples given. */
function writeWav(path: string, rate: number, samples: string, width = 2, channels = 1): void {
  execFileSync(PYTHON, [
    '-c',
    `import wave, numpy as np
x = ${samples}
scale = {1: 127, 2: 32767, 3: 8388607, 4: 2147483647}[${width}]
ints = np.round(np.clip(x, -1, 1) * scale).astype('<i4')
if ${width} == 1:
    data = (ints + 128).astype('u1').tobytes()
else:
    data = b''.join(int(v).to_bytes(${width}, 'little', signed=True) for v in ints)
with wave.open(${JSON.stringify(path)}, 'wb') as w:
    w.setnchannels(${channels}); w.setsampwidth(${width}); w.setframerate(${rate}); w.writeframes(data)`,
  ]);
}

describe('text and WAV inputs through MCP (intents and dtmf demo models)', () => {
  let server: Connected;
  before(async () => {
    server = await connect('stdio', undefined, [], models);
    for (const name of wavs) copyFileSync(join(recordings, name), join(server.workDir, name));
  });
  after(async () => {
    await server?.close();
  });

  it('lists a tool per model whose schema says to pass a sentence or a WAV file', async () => {
    const { tools } = await server.client.listTools();
    const intents = tools.find((t) => t.name === 'intents');
    const dtmf = tools.find((t) => t.name === 'dtmf');
    assert.ok(intents && dtmf, `tools: ${tools.map((t) => t.name).join(', ')}`);
    const text = (intents.inputSchema.properties as Record<string, { description?: string }>).text;
    assert.match(text?.description ?? '', /a string, or a list of strings for several texts \(up to 64 tokens each/);
    assert.match(intents.description ?? '', /"text" \(what the user asked, in English\): a string of text/);
    const audio = (dtmf.inputSchema.properties as Record<string, { description?: string }>).audio;
    assert.match(audio?.description ?? '', /an absolute path or file:\/\/ URL of a WAV file, a data: URI, or base64/);
    assert.match(dtmf.description ?? '', /a WAV recording \(PCM or float; mixed to mono and resampled to 8000 Hz\)/);
    assert.equal(intents.annotations?.readOnlyHint, true);
  });

  it('tells the intent of held-out sentences, called concurrently (batched), and of a list in one call', async () => {
    const answers = await Promise.all(
      sentences.map((s) => answer(server.client, 'intents', { text: s.text, top_k: 1 })),
    );
    const right = answers.filter((a, i) => a.predictions[0]?.[0]?.label === sentences[i]?.intent);
    assert.ok(right.length >= 0.95 * sentences.length, `${right.length} of ${sentences.length} intents right`);
    assert.ok(
      answers.some((a) => a.batch_size > 1),
      'concurrent calls share forward passes',
    );
    const some = sentences.slice(0, 5);
    const listed = await answer(server.client, 'intents', { text: some.map((s) => s.text) });
    assert.equal(listed.predictions.length, 5);
    listed.predictions.forEach((p, i) => {
      assert.equal(p[0]?.label, answers[i]?.predictions[0]?.[0]?.label, 'a list answers as its items alone do');
      assert.equal(p.length, 3, 'the default top_k');
    });
    assert.ok((listed.timings.preprocess_ms ?? -1) >= 0);
  });

  it('runs over a Parquet column of sentences as a batch job: each row answered at its index', async () => {
    const table = join(server.workDir, 'sentences.parquet');
    const rows = [...sentences.map((s) => s.text), null];
    parquetWriteFile({
      filename: table,
      columnData: [
        { name: 'id', data: rows.map((_, i) => i), type: 'INT32' },
        { name: 'text', data: rows, type: 'STRING', nullable: true },
      ],
    });
    const results = join(server.workDir, 'intents.jsonl');
    const result = (await server.client.callTool({
      name: 'start_job',
      arguments: { model: 'intents', items: { table, column: 'text' }, results, wait: true },
    })) as ToolResult & { structuredContent?: { state: string; done: number; errors: Record<string, number> } };
    assert.notEqual(result.isError, true, result.content[0]?.text);
    assert.equal(result.structuredContent?.state, 'completed');
    assert.equal(result.structuredContent?.done, rows.length);
    const lines = readFileSync(results, 'utf8')
      .trim()
      .split('\n')
      .map(
        (l) =>
          JSON.parse(l) as { index: number; item: string; predictions?: { label: string }[]; error?: { code: string } },
      );
    assert.deepEqual(
      lines.map((l) => l.index),
      rows.map((_, i) => i),
    );
    const right = sentences.filter(
      (s, i) => lines[i]?.item === s.text && lines[i]?.predictions?.[0]?.label === s.intent,
    );
    assert.ok(right.length >= 0.95 * sentences.length, `${right.length} of ${sentences.length} intents right`);
    // A null cell is an empty text, which the model answers like any other.
    assert.equal(lines.at(-1)?.item, '');
    assert.ok(lines.at(-1)?.predictions?.length);
  });

  it('reads the key of WAV recordings at other rates, in stereo, at 8, 16, 24 and 32 bits', async () => {
    const answers = await Promise.all(
      wavs.map((name) => answer(server.client, 'dtmf', { audio: join(server.workDir, name) })),
    );
    assert.deepEqual(
      answers.map((a) => a.predictions[0]?.[0]?.label),
      wavs.map((name) => keys[name]),
    );
    const first = wavs[0] as string;
    const b64 = readFileSync(join(recordings, first)).toString('base64');
    for (const audio of [`data:audio/wav;base64,${b64}`, b64, `file://${join(server.workDir, first)}`]) {
      const same = await answer(server.client, 'dtmf', { audio });
      assert.equal(same.predictions[0]?.[0]?.label, keys[first]);
    }
  });

  it('refuses bad recordings and texts with their codes and keeps serving', async () => {
    const dir = server.workDir;
    const good = readFileSync(join(recordings, wavs[0] as string));
    writeFileSync(join(dir, 'truncated.wav'), good.subarray(0, 300));
    const lying = Buffer.from(good.subarray(0, 44));
    writeFileSync(join(dir, 'header-only.wav'), lying);
    writeFileSync(join(dir, 'empty.wav'), Buffer.alloc(0));
    writeFileSync(join(dir, 'song.mp3'), Buffer.concat([Buffer.from('ID3\x04\0\0\0\0\0\0'), Buffer.alloc(64)]));
    const alaw = Buffer.from(good);
    alaw.writeUInt16LE(6, 20); // the fmt chunk's format tag: A-law
    writeFileSync(join(dir, 'alaw.wav'), alaw);
    writeWav(join(dir, 'long.wav'), 8000, 'np.zeros(8000 * 700)');
    const bad: [string, string, RegExp][] = [
      [
        'truncated.wav',
        'BAD_AUDIO',
        /input "audio" item 0: the WAV's data chunk declares \d+ bytes but only \d+ follow/,
      ],
      ['header-only.wav', 'BAD_AUDIO', /input "audio" item 0: /],
      ['empty.wav', 'BAD_AUDIO', /is empty \(0 bytes\)/],
      ['song.mp3', 'AUDIO_FORMAT_NOT_SUPPORTED', /is a MP3 file; this model takes WAV/],
      ['alaw.wav', 'AUDIO_FORMAT_NOT_SUPPORTED', /A-law/],
      ['long.wav', 'AUDIO_TOO_LONG', /lasts 700\.00 s, over the input's max_seconds \(600 s\)/],
    ];
    for (const [name, code, hint] of bad) await refused(server.client, 'dtmf', { audio: join(dir, name) }, code, hint);
    await refused(
      server.client,
      'dtmf',
      { audio: [join(dir, wavs[0] as string), join(dir, 'truncated.wav')] },
      'BAD_AUDIO',
      /input "audio" item 1: /,
    );
    await refused(server.client, 'dtmf', { audio: '/etc/hostname' }, 'PATH_NOT_ALLOWED', /outside the allowed roots/);
    // The tool's schema refuses a number before the call; the generic infer takes any JSON.
    await refused(
      server.client,
      'infer',
      { model: 'intents', inputs: { text: ['fine', 3] } },
      'BAD_TEXT',
      /input "text" item 1: expected a string of text, got number/,
    );
    const still = await answer(server.client, 'dtmf', { audio: join(dir, wavs[1] as string) });
    assert.equal(still.predictions[0]?.[0]?.label, keys[wavs[1] as string]);
  });

  it('answers the good calls of a batch that holds a bad recording', async () => {
    const calls = wavs.slice(0, 6).map((n) => join(server.workDir, n));
    calls.splice(3, 0, join(server.workDir, 'truncated.wav'));
    const results = await Promise.all(calls.map((audio) => tool(server.client, 'dtmf', { audio })));
    results.forEach((result, i) => {
      const name = (calls[i] as string).split('/').at(-1) as string;
      if (name === 'truncated.wav') assert.match(result.content[0]?.text ?? '', /^BAD_AUDIO: /);
      else assert.equal((result.structuredContent as unknown as Answer).predictions[0]?.[0]?.label, keys[name], name);
    });
  });

  it('cuts texts longer than max_length instead of refusing them', async () => {
    const long = `${sentences[0]?.text} ${'and then some more words '.repeat(100)}`;
    const cut = await answer(server.client, 'intents', { text: long });
    assert.equal(cut.predictions[0]?.length, 3);
  });
});

describe("Triton's own clients send texts as BYTES (OIP v2 REST and gRPC)", () => {
  let server: Connected;
  before(async () => {
    server = await connect('http', undefined, ['--grpc', '0'], models);
  });
  after(async () => {
    await server?.close();
  });

  it('binary and JSON BYTES over REST and BYTES over gRPC tell the same intents; bad UTF-8 is refused', () => {
    const python = join(ROOT, '.tensorgate', 'pyclients', 'bin', 'python');
    assert.ok(existsSync(python), 'tritonclient is missing: run bash scripts/install-python-clients.sh');
    const some = sentences.slice(0, 6);
    const host = (server.url as string).replace(/^http:\/\//, '').replace(/\/mcp$/, '');
    const out = execFileSync(
      python,
      [
        join(ROOT, 'test/fixtures/triton_text_client.py'),
        host,
        /OIP v2 gRPC at ([\d.]+:\d+)/.exec(server.serverLog())?.[1] as string,
        'intents',
        ...some.map((s) => s.text),
      ],
      { encoding: 'utf8', timeout: 120_000 },
    );
    const report = JSON.parse(out) as {
      metadata: { inputs: unknown[] };
      binary: number[];
      json: number[];
      grpc: number[];
      bad_utf8: string | null;
    };
    assert.deepEqual(report.metadata.inputs, [{ name: 'text', datatype: 'BYTES', shape: [-1] }]);
    const config = JSON.parse(readFileSync(join(models, 'intents', 'config.json'), 'utf8')) as {
      outputs: { labels: string[] }[];
    };
    const told = report.binary.map((i) => config.outputs[0]?.labels[i]);
    const right = told.filter((label, i) => label === some[i]?.intent).length;
    assert.ok(right >= 5, `${right} of 6 intents right: ${told.join(', ')}`);
    assert.deepEqual(report.json, report.binary);
    assert.deepEqual(report.grpc, report.binary);
    assert.match(report.bad_utf8 ?? '', /^BAD_TEXT: input "text" item 1: the BYTES element is not valid UTF-8/);
  });
});

describe('an embedding output: one vector per text behind a handle', () => {
  let server: Connected;
  before(async () => {
    // The intents model twice: as it is (labels) and answering its scores as unit-length vectors.
    const repo = mkdtempSync(join(tmpdir(), 'tg-embed-'));
    cpSync(join(models, 'intents'), join(repo, 'intents'), { recursive: true });
    cpSync(join(models, 'intents'), join(repo, 'intent-vectors'), { recursive: true });
    const file = join(repo, 'intent-vectors', 'config.json');
    const config = JSON.parse(readFileSync(file, 'utf8'));
    config.name = 'intent-vectors';
    config.processing.output = { type: 'embedding', normalize: true };
    writeFileSync(file, JSON.stringify(config));
    server = await connect('stdio', undefined, [], repo);
  });
  after(async () => {
    await server?.close();
  });

  it('answers a handle of unit vectors, in the direction of the raw outputs, with their norms', async () => {
    const texts = sentences.slice(0, 3).map((s) => s.text);
    const result = await tool(server.client, 'intent-vectors', { text: texts });
    assert.notEqual(result.isError, true, result.content[0]?.text);
    const { embedding } = result.structuredContent as {
      embedding: { uri: string; items: number; dims: number; normalized: boolean; norms: number[] };
    };
    assert.equal(embedding.items, 3);
    assert.equal(embedding.dims, 11);
    assert.equal(embedding.normalized, true);
    assert.match(result.content[0]?.text ?? '', /^embedding: 3 vectors of 11 dims \(unit length\) at tensor:\/\//);
    assert.equal(result.content[1]?.type, 'resource_link');
    const read = async (uri: string) => {
      const res = await server.client.readResource({ uri });
      return toNumbers(decodeNpy(Buffer.from((res.contents[0] as { blob: string }).blob, 'base64')));
    };
    const vectors = await read(embedding.uri);
    // The same texts through the plain model: its raw scores, scaled by the norms answered.
    const plain = await tool(server.client, 'infer', { model: 'intents', inputs: { text: texts } });
    const raw = await read((plain.structuredContent as { outputs: { uri: string }[] }).outputs[0]?.uri as string);
    for (let item = 0; item < 3; item++) {
      const row = vectors.subarray(item * 11, (item + 1) * 11);
      const length = Math.hypot(...row);
      assert.ok(Math.abs(length - 1) < 1e-5, `item ${item} has length ${length}`);
      const norm = embedding.norms[item] as number;
      for (let d = 0; d < 11; d++)
        assert.ok(Math.abs((row[d] as number) * norm - (raw[item * 11 + d] as number)) < 1e-3 * (1 + norm));
    }
  });
});

describe("a model's own processing handler (processing.handler)", () => {
  let server: Connected;
  before(async () => {
    // The intents model, processed by a handler in its version folder instead of the built-ins.
    const repo = mkdtempSync(join(tmpdir(), 'tg-handler-'));
    cpSync(join(models, 'intents'), join(repo, 'intents'), { recursive: true });
    cpSync(join(models, 'intents'), join(repo, 'intent-handler'), { recursive: true });
    copyFileSync(
      join(ROOT, 'test/fixtures/handlers/intent_handler.py'),
      join(repo, 'intent-handler', '1', 'intent_handler.py'),
    );
    const file = join(repo, 'intent-handler', 'config.json');
    const config = JSON.parse(readFileSync(file, 'utf8'));
    config.name = 'intent-handler';
    config.processing = { handler: 'intent_handler:IntentHandler', inputs: { text: { type: 'text' } } };
    writeFileSync(file, JSON.stringify(config));
    server = await connect('stdio', undefined, [], repo);
  });
  after(async () => {
    await server?.close();
  });

  it("answers what the handler's postprocess makes of each item, batched, timed as stages", async () => {
    const some = sentences.slice(0, 8);
    const [handled, builtIn] = await Promise.all([
      Promise.all(some.map((s) => tool(server.client, 'intent-handler', { text: s.text }))),
      Promise.all(some.map((s) => answer(server.client, 'intents', { text: s.text, top_k: 1 }))),
    ]);
    handled.forEach((result, i) => {
      assert.notEqual(result.isError, true, result.content[0]?.text);
      const { answers, timings } = result.structuredContent as {
        answers: { intent: string; words: number }[];
        timings: Record<string, number>;
      };
      assert.deepEqual(answers, [
        { intent: builtIn[i]?.predictions[0]?.[0]?.label, words: (some[i]?.text ?? '').split(/\s+/).length },
      ]);
      assert.match(result.content[0]?.text ?? '', /^\{"intent":/);
      assert.ok((timings.preprocess_ms ?? -1) >= 0 && (timings.postprocess_ms ?? -1) >= 0);
    });
  });

  it('answers HANDLER_FAILED for the call its handler raises on, and the rest of the batch', async () => {
    const texts = ['set an alarm for six', 'raise', 'play some jazz', 'what is the weather in oslo'];
    const results = await Promise.all(texts.map((text) => tool(server.client, 'intent-handler', { text })));
    results.forEach((result, i) => {
      if (texts[i] === 'raise') {
        assert.equal(result.isError, true);
        assert.match(
          result.content[0]?.text ?? '',
          /^HANDLER_FAILED: processing\.handler intent_handler:IntentHandler\.preprocess raised ValueError: this handler does not take the word 'raise'/,
        );
      } else assert.notEqual(result.isError, true, result.content[0]?.text);
    });
    const again = await tool(server.client, 'intent-handler', { text: 'call mum' });
    assert.notEqual(again.isError, true, 'the worker serves on');
  });
});

describe('a text output: token ids decoded by the model tokenizer', () => {
  let server: Connected;
  const fixture = join(ROOT, 'test/fixtures/text_output_model.py');
  const tokenizer = join(models, 'intents', '1', 'tokenizer.json');
  before(async () => {
    const repo = mkdtempSync(join(tmpdir(), 'tg-text-out-'));
    execFileSync(PYTHON, [fixture, repo, tokenizer]);
    server = await connect('stdio', undefined, [], repo);
  });
  after(async () => {
    await server?.close();
  });

  it("answers each item's tokens decoded, padding and special tokens left out", async () => {
    const texts = ['play some jazz music', 'what is the weather like in paris tomorrow', 'hi'];
    const expected = JSON.parse(execFileSync(PYTHON, [fixture, 'expect', tokenizer, ...texts], { encoding: 'utf8' }));
    const result = await tool(server.client, 'reverse', { text: texts });
    assert.notEqual(result.isError, true, result.content[0]?.text);
    const { texts: answered } = result.structuredContent as { texts: string[] };
    assert.deepEqual(answered, expected);
    assert.equal(answered[0], 'music jazz some play');
    assert.match(result.content[0]?.text ?? '', /^music jazz some play\n/);
  });
});
