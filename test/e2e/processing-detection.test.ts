import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type Connected, connect } from '../helpers/mcp.js';
import { PYTHON, ROOT } from '../helpers/models.js';

/**
 * Detection outputs end to end: the real CLI over stdio, the official MCP client, real torch
 * workers running two small exported detectors on image files resized and cropped by Pillow.
 * Every answer is compared with test/fixtures/detection_models.py's reference, which does the
 * image steps, the box mapping, the threshold and NMS on its own.
 */

const FIXTURE = join(ROOT, 'test/fixtures/detection_models.py');

interface DetectionAnswer {
  width: number;
  height: number;
  objects: { label: string; score: number; box: number[] }[];
}

interface ToolResult {
  isError?: boolean;
  content: { type: string; text?: string }[];
  structuredContent?: { detections: DetectionAnswer[]; batch_size: number; timings: Record<string, number> };
}

/**
 * Pictures of light rectangles on dark ground, in several formats and sizes; one a JPEG whose
 * EXIF orientation turns it upright (so its pixels as stored are sideways), one with nothing.
 */
const PICTURES = `
import json, sys
from PIL import Image, ImageDraw
out = sys.argv[1]
made = {}
def picture(name, size, rect, fmt, **save):
    image = Image.new("RGB", size, (12, 14, 10))
    if rect:
        ImageDraw.Draw(image).rectangle(rect, fill=(245, 240, 250))
    path = f"{out}/{name}"
    image.save(path, fmt, **save)
    made[name] = path
picture("wide.png", (300, 200), [120, 60, 199, 139], "PNG")
picture("tall.webp", (150, 260), [40, 120, 109, 189], "WEBP", lossless=True)
picture("small.bmp", (64, 64), [5, 20, 40, 50], "BMP")
picture("empty.png", (120, 160), None, "PNG")
for i in range(8):
    picture(f"many-{i}.png", (200 + 10 * i, 180), [70 + i, 40 + 2 * i, 120 + 3 * i, 130], "PNG")
# Stored sideways (200 wide, 300 high); its EXIF orientation (6: rotate 90 clockwise to view)
# makes it 300 wide and 200 high upright.
image = Image.new("RGB", (200, 300), (12, 14, 10))
ImageDraw.Draw(image).rectangle([50, 110, 129, 189], fill=(245, 240, 250))
exif = Image.Exif()
exif[0x0112] = 6
image.save(f"{out}/rotated.jpg", "JPEG", quality=95, exif=exif)
made["rotated.jpg"] = f"{out}/rotated.jpg"
print(json.dumps(made))
`;

function reference(model: string, repo: string, images: string[]): DetectionAnswer[] {
  return JSON.parse(
    execFileSync(PYTHON, [FIXTURE, 'reference', join(repo, model), ...images], { encoding: 'utf8' }),
  ) as DetectionAnswer[];
}

function assertSame(got: DetectionAnswer[], expected: DetectionAnswer[], what: string): void {
  assert.equal(got.length, expected.length, what);
  got.forEach((g, i) => {
    const e = expected[i] as DetectionAnswer;
    assert.deepEqual([g.width, g.height], [e.width, e.height], `${what} image ${i} size`);
    assert.deepEqual(
      g.objects.map((o) => o.label),
      e.objects.map((o) => o.label),
      `${what} image ${i}: ${JSON.stringify(g.objects)} against ${JSON.stringify(e.objects)}`,
    );
    g.objects.forEach((o, j) => {
      const r = e.objects[j] as DetectionAnswer['objects'][number];
      assert.ok(Math.abs(o.score - r.score) < 1e-3, `${what} image ${i} score ${o.score} against ${r.score}`);
      const off = Math.max(...o.box.map((v, k) => Math.abs(v - (r.box[k] as number))));
      assert.ok(off <= 0.01, `${what} image ${i} box ${o.box} against ${r.box}`);
    });
  });
}

describe('detection outputs: boxes mapped back to the image as sent', () => {
  let server: Connected;
  let repo: string;
  let pictures: Record<string, string>;

  before(async () => {
    repo = mkdtempSync(join(tmpdir(), 'tg-detection-'));
    execFileSync(PYTHON, [FIXTURE, repo]);
    server = await connect('stdio', undefined, [], repo);
    pictures = JSON.parse(execFileSync(PYTHON, ['-c', PICTURES, server.workDir], { encoding: 'utf8' })) as Record<
      string,
      string
    >;
  });
  after(async () => {
    await server?.close();
  });

  const detect = async (name: string, args: Record<string, unknown>): Promise<ToolResult> =>
    (await server.client.callTool({ name, arguments: args })) as ToolResult;

  it('lists a tool per detector whose schemas say what to pass and what comes back', async () => {
    const { tools } = await server.client.listTools();
    const tool = tools.find((t) => t.name === 'light-boxes');
    assert.ok(tool, 'the detector has its own tool');
    assert.match(tool.description ?? '', /label, score and box \[x1, y1, x2, y2\] in the image's own pixels/);
    const input = tool.inputSchema.properties as Record<string, { description?: string }>;
    assert.deepEqual(Object.keys(input).sort(), ['image', 'threshold', 'version']);
    assert.match(input.threshold?.description ?? '', /default 0\.5/);
    const output = tool.outputSchema?.properties as Record<string, unknown>;
    assert.ok('detections' in output);
  });

  for (const model of ['light-boxes', 'light-boxes-norm']) {
    it(`${model}: finds the rectangle in each image, in its own pixels, as the reference does`, async () => {
      const names = ['wide.png', 'tall.webp', 'small.bmp', 'empty.png', 'rotated.jpg'];
      const images = names.map((n) => pictures[n] as string);
      const result = await detect(model, { image: images });
      assert.notEqual(result.isError, true, result.content[0]?.text);
      const got = result.structuredContent?.detections ?? [];
      assertSame(got, reference(model, repo, images), model);
      // The rectangles as drawn, within the resize's pixel size: the mapping undoes it.
      const [wide, tall, , empty, rotated] = got;
      const near = (box: number[] | undefined, drawn: number[], slack: number) =>
        assert.ok(
          box?.every((v, k) => Math.abs(v - (drawn[k] as number)) <= slack),
          `${box} against the drawn ${drawn}`,
        );
      near(wide?.objects[0]?.box, [120, 60, 200, 140], 3);
      near(tall?.objects[0]?.box, [40, 120, 110, 190], 3);
      assert.deepEqual(empty?.objects, []);
      // Upright, the rotated JPEG is 300x200 and its rectangle lies at x 110-190, y 50-130.
      assert.deepEqual([rotated?.width, rotated?.height], [300, 200]);
      near(rotated?.objects[0]?.box, [110, 50, 190, 130], 4);
      // One object each: the copy one pixel off was suppressed, the corner box under the threshold.
      assert.deepEqual(
        got.map((a) => a.objects.length),
        [1, 1, 1, 0, 1],
      );
      const lines = (result.content[0]?.text ?? '').split('\n');
      assert.match(lines[0] ?? '', /^image 0: light 0\.98\d* at \[\d+(\.\d+)?, /);
      assert.equal(lines[3], 'image 3: no object scored above the threshold (120x160 image)');
      assert.match(result.content[0]?.text ?? '', /timings ms: total .* preprocess .* postprocess/);
    });
  }

  it("takes a lower threshold per call: the corner box appears, the suppressed copy doesn't", async () => {
    const image = pictures['wide.png'] as string;
    const result = await detect('light-boxes', { image, threshold: 0.2 });
    const objects = result.structuredContent?.detections[0]?.objects ?? [];
    assert.equal(objects.length, 2, JSON.stringify(objects));
    assert.ok(Math.abs((objects[1]?.score ?? 0) - 0.2689) < 1e-3);
    // The corner box [0, 0, 8, 8] of the 64x64 crop, back in the 300x200 picture.
    const expected = [22, 4, 30, 12].map((v) => (v * 200) / 72);
    const off = Math.max(...(objects[1]?.box ?? []).map((v, k) => Math.abs(v - (expected[k] as number))));
    assert.ok(off < 0.01, `${objects[1]?.box} against ${expected}`);
  });

  it('splits each item of a batch its own geometry: concurrent calls of different sizes', async () => {
    const names = Array.from({ length: 8 }, (_, i) => `many-${i}.png`);
    const results = await Promise.all(names.map((n) => detect('light-boxes-norm', { image: pictures[n] })));
    const expected = reference(
      'light-boxes-norm',
      repo,
      names.map((n) => pictures[n] as string),
    );
    results.forEach((r, i) => {
      assert.notEqual(r.isError, true, r.content[0]?.text);
      assertSame(r.structuredContent?.detections ?? [], [expected[i] as DetectionAnswer], names[i] as string);
    });
    assert.ok(
      results.some((r) => (r.structuredContent?.batch_size ?? 0) > 1),
      'some calls were batched together',
    );
  });

  it('answers detections through the generic infer tool too, with the raw outputs by handle', async () => {
    const result = (await server.client.callTool({
      name: 'infer',
      arguments: { model: 'light-boxes', inputs: { image: pictures['wide.png'] } },
    })) as ToolResult & { structuredContent: { outputs: { name: string; uri: string }[] } };
    assert.notEqual(result.isError, true, result.content[0]?.text);
    assertSame(
      result.structuredContent.detections,
      reference('light-boxes', repo, [pictures['wide.png'] as string]),
      'infer',
    );
    assert.deepEqual(
      result.structuredContent.outputs.map((o) => o.name),
      ['boxes', 'logits'],
    );
  });
});
