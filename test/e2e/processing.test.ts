import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import type { Client } from '@modelcontextprotocol/client';
import { type Connected, connect } from '../helpers/mcp.js';
import { ensureDigitsModels, PYTHON, ROOT } from '../helpers/models.js';

/**
 * A model with processing, end to end: the real CLI over stdio, the official MCP client, a real
 * torch worker decoding real image files with Pillow. The digits demo model must read held-out
 * scans saved as image files; bad files must get their codes while the server serves on.
 */

interface ToolResult {
  isError?: boolean;
  content: { type: string; text?: string }[];
  structuredContent?: Record<string, unknown>;
}

interface Prediction {
  label: string;
  score: number;
  index: number;
}

interface Answer {
  predictions: Prediction[][];
  batch_size: number;
  timings: Record<string, number>;
}

const models = ensureDigitsModels();
const examples = join(models, 'digits', 'examples');
const labels = JSON.parse(readFileSync(join(examples, 'labels.json'), 'utf8')) as Record<string, number>;
const names = Object.keys(labels);

async function call(client: Client, image: unknown, parameters?: Record<string, unknown>): Promise<ToolResult> {
  return (await client.callTool({
    name: 'infer',
    arguments: { model: 'digits', inputs: { image }, ...(parameters ? { parameters } : {}) },
  })) as ToolResult;
}

async function answer(client: Client, image: unknown, parameters?: Record<string, unknown>): Promise<Answer> {
  const result = await call(client, image, parameters);
  assert.notEqual(result.isError, true, `infer failed: ${result.content[0]?.text}`);
  return result.structuredContent as unknown as Answer;
}

async function refused(client: Client, image: unknown, code: string, hint?: RegExp): Promise<string> {
  const result = await call(client, image);
  const text = result.content[0]?.text ?? '';
  assert.equal(result.isError, true, `expected ${code}, got: ${text}`);
  assert.match(text, new RegExp(`^${code}: `), text);
  if (hint) assert.match(text, hint);
  return text;
}

async function waitFor(condition: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Converts an image file with Pillow (as the agent's tools might have saved it). */
function convert(from: string, to: string, format: string, extra = ''): void {
  execFileSync(PYTHON, [
    '-c',
    `from PIL import Image\nimage = Image.open(${JSON.stringify(from)})\n${extra}\nimage.save(${JSON.stringify(to)}, ${JSON.stringify(format)})`,
  ]);
}

describe('image inputs through MCP (digits demo model)', () => {
  let server: Connected;
  let dir: string;
  before(async () => {
    server = await connect('stdio', undefined, [], models);
    dir = join(server.workDir, 'images');
    mkdirSync(dir);
    for (const name of names) copyFileSync(join(examples, name), join(dir, name));
  });
  after(async () => {
    await server?.close();
  });

  it('reads held-out digits from PNG files, called concurrently (batched)', async () => {
    const answers = await Promise.all(names.map((name) => answer(server.client, join(dir, name))));
    const right = answers.filter((a, i) => a.predictions[0]?.[0]?.label === String(labels[names[i] as string]));
    assert.ok(right.length >= 0.97 * names.length, `${right.length} of ${names.length} digits read right`);
    const first = answers[0] as Answer;
    assert.equal(first.predictions.length, 1);
    assert.equal(first.predictions[0]?.length, 3, 'the config asks for the top 3');
    const scores = first.predictions[0]?.map((p) => p.score) ?? [];
    assert.deepEqual(
      scores,
      [...scores].sort((a, b) => b - a),
    );
    assert.ok(scores.every((s) => s >= 0 && s <= 1));
    assert.ok(first.timings.preprocess_ms !== undefined && first.timings.preprocess_ms >= 0);
    assert.ok(first.timings.postprocess_ms !== undefined);
    assert.ok(
      answers.some((a) => a.batch_size > 1),
      'concurrent calls share forward passes',
    );
  });

  it('takes the same image as a data: URI, bare base64, {b64}, {path} and a file:// URL', async () => {
    const name = names[3] as string;
    const path = join(dir, name);
    const b64 = readFileSync(path).toString('base64');
    const expected = (await answer(server.client, path)).predictions;
    for (const form of [`data:image/png;base64,${b64}`, b64, { b64 }, { path }, pathToFileURL(path).href]) {
      assert.deepEqual((await answer(server.client, form)).predictions, expected, JSON.stringify(form).slice(0, 40));
    }
  });

  it('answers a list of images in one call, one answer per image, in order', async () => {
    const some = names.slice(0, 5);
    const result = await answer(
      server.client,
      some.map((n) => join(dir, n)),
      { top_k: 1 },
    );
    assert.equal(result.predictions.length, 5);
    for (const [i, name] of some.entries()) {
      const single = await answer(server.client, join(dir, name), { top_k: 1 });
      assert.deepEqual(result.predictions[i], single.predictions[0]);
    }
  });

  it('reads JPEG, WebP, GIF and BMP files, and trusts the bytes over the extension', async () => {
    const name = names[7] as string;
    const digit = String(labels[name]);
    const png = join(dir, name);
    for (const [ext, format] of [
      ['jpg', 'JPEG'],
      ['webp', 'WEBP'],
      ['gif', 'GIF'],
      ['bmp', 'BMP'],
    ] as const) {
      const file = join(dir, `converted.${ext}`);
      convert(png, file, format, format === 'JPEG' ? 'image = image.convert("RGB")' : '');
      assert.equal((await answer(server.client, file)).predictions[0]?.[0]?.label, digit, format);
    }
    const misnamed = join(dir, 'actually-a-png.jpg');
    copyFileSync(png, misnamed);
    assert.equal((await answer(server.client, misnamed)).predictions[0]?.[0]?.label, digit);
  });

  it('refuses bad image files with their codes and keeps serving', async () => {
    const png = readFileSync(join(dir, names[0] as string));
    const truncated = join(dir, 'truncated.png');
    writeFileSync(truncated, png.subarray(0, Math.floor(png.byteLength / 2)));
    await refused(server.client, truncated, 'BAD_IMAGE', /truncated\.png|corrupt or truncated/);

    const corrupt = Buffer.from(png);
    corrupt.fill(0x5a, 40, corrupt.byteLength - 20); // header intact, pixel data garbage
    const corruptPath = join(dir, 'corrupt.png');
    writeFileSync(corruptPath, corrupt);
    await refused(server.client, corruptPath, 'BAD_IMAGE', /corrupt/);

    const empty = join(dir, 'empty.png');
    writeFileSync(empty, '');
    await refused(server.client, empty, 'BAD_IMAGE', /empty \(0 bytes\)/);

    const text = join(dir, 'notes.png');
    writeFileSync(text, 'these are my notes, not a picture');
    await refused(server.client, text, 'BAD_IMAGE', /begins with text/);

    const tiff = join(dir, 'scan.tiff');
    convert(join(dir, names[0] as string), tiff, 'TIFF');
    await refused(server.client, tiff, 'IMAGE_FORMAT_NOT_SUPPORTED', /TIFF image; this model takes PNG/);

    // 12,000 x 12,000 of one colour compresses to a few hundred KB but would decode to 144 Mpx.
    const bomb = join(dir, 'bomb.png');
    execFileSync(PYTHON, [
      '-c',
      `from PIL import Image\nImage.new("L", (12000, 12000), 255).save(${JSON.stringify(bomb)}, optimize=True)`,
    ]);
    await refused(server.client, bomb, 'IMAGE_TOO_LARGE', /144000000 pixels, over this input's limit of 50000000/);

    const outside = join(tmpdir(), `tensorgate-outside-${process.pid}.png`);
    copyFileSync(join(dir, names[0] as string), outside);
    await refused(server.client, outside, 'PATH_NOT_ALLOWED', /outside the allowed roots/);
    const link = join(dir, 'link-out.png');
    symlinkSync(outside, link);
    await refused(server.client, link, 'PATH_NOT_ALLOWED', /outside the allowed roots/);
    await refused(server.client, join(dir, 'missing.png'), 'FILE_NOT_FOUND');
    await refused(server.client, 'images/relative.png', 'PATH_NOT_ALLOWED', /not absolute/);
    await refused(server.client, 'data:image/png,notbase64', 'BAD_IMAGE', /must be base64/);
    await refused(
      server.client,
      { handle: 'tensor://x' },
      'HANDLE_NOT_FOUND',
      /tensor:\/\/x is unknown or has expired/,
    );
    await refused(server.client, [], 'BAD_IMAGE', /empty list/);

    const listed = await refused(server.client, [join(dir, names[1] as string), empty], 'BAD_IMAGE');
    assert.match(listed, /item 1/, 'a list names the item that failed');

    // Still serving, and right.
    const name = names[2] as string;
    assert.equal((await answer(server.client, join(dir, name))).predictions[0]?.[0]?.label, String(labels[name]));
  });

  it('answers the good calls of a batch that holds a corrupt image', async () => {
    const png = readFileSync(join(dir, names[0] as string));
    const broken = join(dir, 'broken.png');
    writeFileSync(broken, Buffer.concat([png.subarray(0, 60), Buffer.alloc(40, 1)]));
    const calls = names.slice(10, 30).map((n) => join(dir, n));
    calls.splice(7, 0, broken);
    const results = await Promise.all(calls.map((path) => call(server.client, path)));
    results.forEach((result, i) => {
      const text = result.content[0]?.text ?? '';
      if (i === 7) assert.match(text, /^BAD_IMAGE: /);
      else {
        assert.notEqual(result.isError, true, text);
        const name = (calls[i] as string).split('/').at(-1) as string;
        const got = (result.structuredContent as unknown as Answer).predictions[0]?.[0]?.label;
        assert.ok(got !== undefined && /^\d$/.test(got), `${name}: ${got}`);
      }
    });
  });

  it('lists the model as a tool of its own, with a schema made from its processing', async () => {
    const { tools } = await server.client.listTools();
    const tool = tools.find((t) => t.name === 'digits');
    assert.ok(tool, `tools: ${tools.map((t) => t.name).join(', ')}`);
    assert.match(tool.description ?? '', /Reads a handwritten digit.*Takes "image" \(the image of one digit\)/);
    assert.match(tool.description ?? '', /top 3 labels/);
    const properties = tool.inputSchema.properties as Record<string, { description?: string }>;
    assert.deepEqual(Object.keys(properties).sort(), ['image', 'threshold', 'top_k', 'version']);
    assert.match(
      properties.image?.description ?? '',
      /absolute path or file:\/\/ URL of a PNG, JPEG, WEBP, GIF, BMP file/,
    );
    assert.deepEqual(tool.inputSchema.required, ['image']);
    assert.equal(tool.annotations?.readOnlyHint, true);
    assert.ok((tool.outputSchema?.properties as Record<string, unknown> | undefined)?.predictions);
    const described = (await server.client.callTool({
      name: 'describe_model',
      arguments: { model: 'digits' },
    })) as ToolResult;
    assert.match(described.content[0]?.text ?? '', /Takes "image" \(image files\) through its own tool "digits"/);
    const processing = (described.structuredContent as { processing: { inputs: { image: { mode: string } } } })
      .processing;
    assert.equal(processing.inputs.image.mode, 'L');
  });

  it("answers through the model's tool: labels first in the text, predictions in the structure", async () => {
    const name = names[5] as string;
    const result = (await server.client.callTool({
      name: 'digits',
      arguments: { image: join(dir, name), top_k: 2 },
    })) as ToolResult;
    assert.notEqual(result.isError, true, result.content[0]?.text);
    const text = result.content[0]?.text ?? '';
    assert.match(text, new RegExp(`^${labels[name]} \\([\\d.e-]+\\), \\d \\(`));
    assert.match(text, /timings ms: total [\d.]+ = decode [\d.]+ \+ preprocess [\d.]+ \+ queue/);
    const structured = result.structuredContent as unknown as Answer & { model: string };
    assert.equal(structured.model, 'digits');
    assert.equal(structured.predictions[0]?.length, 2);
    assert.equal(structured.predictions[0]?.[0]?.label, String(labels[name]));
    const bad = (await server.client.callTool({
      name: 'digits',
      arguments: { image: join(dir, 'nope.png') },
    })) as ToolResult;
    assert.equal(bad.isError, true);
    assert.match(bad.content[0]?.text ?? '', /^FILE_NOT_FOUND: /);
  });

  it('removes the tool while the model is unloaded and lists it again once loaded, telling the client', async () => {
    let changes = 0;
    server.client.setNotificationHandler('notifications/tools/list_changed', () => {
      changes += 1;
    });
    const listed = async () => (await server.client.listTools()).tools.some((t) => t.name === 'digits');
    const unload = (await server.client.callTool({
      name: 'unload_model',
      arguments: { model: 'digits' },
    })) as ToolResult;
    assert.notEqual(unload.isError, true, unload.content[0]?.text);
    await waitFor(() => changes >= 1);
    assert.equal(await listed(), false);
    const load = (await server.client.callTool({ name: 'load_model', arguments: { model: 'digits' } })) as ToolResult;
    assert.notEqual(load.isError, true, load.content[0]?.text);
    await waitFor(() => changes >= 2);
    assert.equal(await listed(), true);
    const name = names[9] as string;
    assert.equal((await answer(server.client, join(dir, name))).predictions[0]?.[0]?.label, String(labels[name]));
  });

  it('reports preprocess and postprocess in get_metrics and explain_latency', async () => {
    const explained = (await server.client.callTool({
      name: 'explain_latency',
      arguments: { model: 'digits' },
    })) as ToolResult;
    const breakdown = (explained.structuredContent as { breakdown: { stage: string; ms: number }[] }).breakdown;
    const stages = breakdown.map((s) => s.stage);
    assert.ok(stages.includes('preprocess') && stages.includes('postprocess'), stages.join(', '));
    assert.ok((breakdown.find((s) => s.stage === 'preprocess')?.ms ?? 0) > 0);
    const metrics = (await server.client.callTool({
      name: 'get_metrics',
      arguments: { model: 'digits', detail: 'full' },
    })) as ToolResult;
    const row = (metrics.structuredContent as { models: { stages_ms: Record<string, { p50: number }> }[] }).models[0];
    assert.ok((row?.stages_ms.preprocess?.p50 ?? 0) > 0);
  });

  it('takes top_k and threshold, and refuses tensors and unknown inputs', async () => {
    const path = join(dir, names[0] as string);
    const all = await answer(server.client, path, { top_k: 10 });
    assert.equal(all.predictions[0]?.length, 10);
    const total = all.predictions[0]?.reduce((sum, p) => sum + p.score, 0) ?? 0;
    assert.ok(Math.abs(total - 1) < 0.01, `softmax scores sum to ${total}`);
    const sure = await answer(server.client, path, { top_k: 10, threshold: 0.5 });
    assert.ok((sure.predictions[0]?.length ?? 0) <= 1);
    const wrong = (await server.client.callTool({
      name: 'infer',
      arguments: { model: 'digits', inputs: { pixels: path } },
    })) as ToolResult;
    assert.equal(wrong.isError, true);
    assert.match(wrong.content[0]?.text ?? '', /^UNKNOWN_INPUT: input "pixels".*takes "image"/);
  });
});

describe("a model's tool over Streamable HTTP, 2026-07-28 (a server per request)", () => {
  let server: Connected;
  before(async () => {
    server = await connect('http-2026', undefined, [], models);
  });
  after(async () => {
    await server?.close();
  });

  it('is listed and answers, the same as over stdio', async () => {
    const { tools } = await server.client.listTools();
    assert.ok(tools.some((t) => t.name === 'digits'));
    const name = names[11] as string;
    const image = `data:image/png;base64,${readFileSync(join(examples, name)).toString('base64')}`;
    const result = (await server.client.callTool({ name: 'digits', arguments: { image } })) as ToolResult;
    assert.notEqual(result.isError, true, result.content[0]?.text);
    const structured = result.structuredContent as unknown as Answer;
    assert.equal(structured.predictions[0]?.[0]?.label, String(labels[name]));
  });
});

describe("Triton's own clients send image files as BYTES (OIP v2 REST and gRPC)", () => {
  let server: Connected;
  before(async () => {
    server = await connect('http', undefined, ['--grpc', '0'], models);
  });
  after(async () => {
    await server?.close();
  });

  it('binary BYTES (the files), JSON BYTES (their paths) and gRPC BYTES all give the right digits', () => {
    const python = join(ROOT, '.tensorgate', 'pyclients', 'bin', 'python');
    assert.ok(existsSync(python), 'tritonclient is missing: run bash scripts/install-python-clients.sh');
    const some = names.slice(20, 26);
    for (const name of some) copyFileSync(join(examples, name), join(server.workDir, name));
    const host = (server.url as string).replace(/^http:\/\//, '').replace(/\/mcp$/, '');
    const out = execFileSync(
      python,
      [
        join(ROOT, 'test/fixtures/triton_bytes_client.py'),
        host,
        /OIP v2 gRPC at ([\d.]+:\d+)/.exec(server.serverLog())?.[1] as string,
        'digits',
        ...some.map((n) => join(server.workDir, n)),
      ],
      { encoding: 'utf8', timeout: 120_000 },
    );
    const report = JSON.parse(out) as {
      metadata: { inputs: unknown[]; outputs: { name: string; datatype: string }[] };
      grpc_metadata: { inputs: unknown[] };
      binary: number[];
      json_paths: number[];
      grpc: number[];
      corrupt: string | null;
      not_an_image: string | null;
      grpc_corrupt: string | null;
    };
    assert.deepEqual(report.metadata.inputs, [{ name: 'image', datatype: 'BYTES', shape: [-1] }]);
    assert.equal(report.metadata.outputs[0]?.datatype, 'FP32');
    const expected = some.map((n) => labels[n]);
    assert.deepEqual(report.binary, expected);
    assert.deepEqual(report.json_paths, expected);
    assert.deepEqual(report.grpc, expected);
    assert.deepEqual(report.grpc_metadata.inputs, [{ name: 'image', datatype: 'BYTES', shape: ['-1'] }]);
    assert.match(report.grpc_corrupt ?? '', /BAD_IMAGE: input "image" item 0: the PNG data is corrupt/);
    assert.match(report.corrupt ?? '', /^BAD_IMAGE: input "image" item 0: the PNG data is corrupt/);
    assert.match(report.not_an_image ?? '', /^BAD_IMAGE: .*is not a PNG, JPEG, WebP, GIF or BMP image/);
  });
});

describe('image and mask outputs: pictures answered as PNG image content', () => {
  let server: Connected;
  let picture: string;
  before(async () => {
    const repo = mkdtempSync(join(tmpdir(), 'tg-pictures-'));
    execFileSync(PYTHON, [join(ROOT, 'test/fixtures/image_output_models.py'), repo]);
    server = await connect('stdio', undefined, [], repo);
    picture = join(server.workDir, 'digit.png');
    copyFileSync(join(examples, names[3] as string), picture);
  });
  after(async () => {
    await server?.close();
  });

  /** The worst pixel difference between a returned PNG and the picture PIL and numpy make. */
  function worst(model: string, png: string): { size: number[]; worst: number } {
    const file = join(server.workDir, `${model}-answer.png`);
    writeFileSync(file, Buffer.from(png, 'base64'));
    const out = execFileSync(
      PYTHON,
      [join(ROOT, 'test/fixtures/image_output_models.py'), 'check', picture, file, model],
      {
        encoding: 'utf8',
      },
    );
    return JSON.parse(out) as { size: number[]; worst: number };
  }

  it("answers an image output as the PNG of the model's picture", async () => {
    const result = (await server.client.callTool({ name: 'ink', arguments: { image: [picture, picture] } })) as {
      isError?: boolean;
      content: { type: string; text?: string; data?: string; mimeType?: string }[];
      structuredContent?: { images: { width: number; height: number }[] };
    };
    assert.notEqual(result.isError, true, result.content[0]?.text);
    assert.match(result.content[0]?.text ?? '', /^image 0: 16x16 PNG\nimage 1: 16x16 PNG\n/);
    const images = result.content.filter((c) => c.type === 'image');
    assert.equal(images.length, 2);
    assert.equal(images[0]?.mimeType, 'image/png');
    assert.deepEqual(result.structuredContent?.images, [
      { width: 16, height: 16 },
      { width: 16, height: 16 },
    ]);
    const check = worst('ink', images[0]?.data as string);
    assert.deepEqual(check.size, [16, 16]);
    assert.ok(check.worst <= 1, `pixels differ by up to ${check.worst}`);
  });

  it('takes a tensor:// handle of pictures as an image input: ink on its own output is the picture', async () => {
    const first = (await server.client.callTool({
      name: 'infer',
      arguments: { model: 'ink', inputs: { image: picture } },
    })) as { isError?: boolean; content: { text?: string }[]; structuredContent?: { outputs: { uri: string }[] } };
    assert.notEqual(first.isError, true, first.content[0]?.text);
    const handle = first.structuredContent?.outputs[0]?.uri as string;
    assert.match(handle, /^tensor:\/\//);
    // The URI through the model's tool, {"handle": URI} through infer.
    for (const [name, args] of [
      ['ink', { image: handle }],
      ['infer', { model: 'ink', inputs: { image: { handle } } }],
    ] as const) {
      const again = (await server.client.callTool({ name, arguments: args })) as {
        isError?: boolean;
        content: { type: string; text?: string; data?: string }[];
      };
      assert.notEqual(again.isError, true, again.content[0]?.text);
      const check = worst('ink-twice', again.content.find((c) => c.type === 'image')?.data as string);
      assert.ok(check.worst <= 1, `pixels differ by up to ${check.worst}`);
    }
    // A handle of something that is not pictures, and one that does not exist.
    const mask = (await server.client.callTool({
      name: 'infer',
      arguments: { model: 'ink-mask', inputs: { image: picture } },
    })) as { structuredContent?: { outputs: { uri: string }[] } };
    const notPictures = (await server.client.callTool({
      name: 'ink',
      arguments: { image: mask.structuredContent?.outputs[0]?.uri },
    })) as { isError?: boolean; content: { text?: string }[] };
    assert.equal(notPictures.isError, true);
    assert.match(
      notPictures.content[0]?.text ?? '',
      /^BAD_IMAGE: input "image": tensor:\/\/\S+ is int64\[1, 16, 16\], not pictures/,
    );
    const gone = (await server.client.callTool({ name: 'ink', arguments: { image: 'tensor://nope' } })) as {
      content: { text?: string }[];
    };
    assert.match(gone.content[0]?.text ?? '', /^HANDLE_NOT_FOUND: /);
  });

  it("answers a mask output as a PNG in a colour per class, with each class's share", async () => {
    const result = (await server.client.callTool({ name: 'ink-mask', arguments: { image: picture } })) as {
      isError?: boolean;
      content: { type: string; text?: string; data?: string }[];
      structuredContent?: { images: { coverage: Record<string, number> }[] };
    };
    assert.notEqual(result.isError, true, result.content[0]?.text);
    const coverage = result.structuredContent?.images[0]?.coverage ?? {};
    assert.deepEqual(Object.keys(coverage).sort(), ['ink', 'paper']);
    assert.ok(Math.abs((coverage.ink ?? 0) + (coverage.paper ?? 0) - 1) < 1e-3);
    assert.match(result.content[0]?.text ?? '', /^mask: 16x16, (paper|ink) 0\.\d+, (paper|ink) 0\.\d+/);
    const check = worst('ink-mask', result.content.find((c) => c.type === 'image')?.data as string);
    assert.equal(check.worst, 0, 'the ink pixels are the coloured ones');
  });
});
