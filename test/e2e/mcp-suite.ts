import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Client } from '@modelcontextprotocol/client';
import { decodeNpy } from '../../src/tensor/npy.js';
import { encodeSafetensors } from '../../src/tensor/safetensors.js';
import { toNumbers } from '../../src/tensor/tensor.js';
import { type Connected, connect, type TransportKind } from '../helpers/mcp.js';
import { PYTHON, referenceForward } from '../helpers/models.js';

/**
 * One behaviour suite, run against every MCP transport (stdio and Streamable HTTP): the real CLI,
 * real Python workers with real PyTorch, the official MCP client. Results are compared with a
 * direct PyTorch forward pass of the same model on the same input.
 */

interface ToolResult {
  isError?: boolean;
  content: { type: string; text?: string; uri?: string }[];
  structuredContent?: Record<string, unknown>;
}

interface InferOutput {
  request_id: string;
  version: string;
  outputs: { name: string; dtype: string; shape: number[]; uri: string; summary: Record<string, unknown> }[];
  timings: Record<string, number>;
  notes: string[];
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<ToolResult> {
  return (await client.callTool({ name, arguments: args })) as ToolResult;
}

async function infer(client: Client, args: Record<string, unknown>): Promise<InferOutput> {
  const result = await call(client, 'infer', args);
  assert.notEqual(result.isError, true, `infer failed: ${result.content[0]?.text}`);
  return result.structuredContent as unknown as InferOutput;
}

async function expectError(client: Client, args: Record<string, unknown>, code: string, hint?: RegExp): Promise<void> {
  const result = await call(client, 'infer', args);
  assert.equal(result.isError, true, `expected ${code}, got success`);
  const text = result.content[0]?.text ?? '';
  assert.match(text, new RegExp(`^${code}: `), text);
  if (hint) assert.match(text, hint);
}

/** Reads a tensor:// resource (the full tensor as .npy). */
async function readTensor(client: Client, uri: string): Promise<Float64Array> {
  const res = await client.readResource({ uri });
  const content = res.contents[0] as { blob?: string; mimeType?: string };
  assert.equal(content.mimeType, 'application/x-npy');
  return toNumbers(decodeNpy(Buffer.from(content.blob as string, 'base64')));
}

function readNpy(path: string): Float64Array {
  return toNumbers(decodeNpy(readFileSync(path)));
}

function assertClose(actual: Float64Array, expected: Float64Array, tol = 1e-4): void {
  assert.equal(actual.length, expected.length, 'element count');
  for (let i = 0; i < actual.length; i++) {
    const a = actual[i] as number;
    const e = expected[i] as number;
    assert.ok(Math.abs(a - e) <= tol * (1 + Math.abs(e)), `element ${i}: ${a} != ${e}`);
  }
}

/** Writes seeded random inputs with numpy: .npy files, one .safetensors file, raw bytes for b64. */
function makeInputs(dir: string): void {
  execFileSync(PYTHON, [
    '-c',
    `
import json, struct, numpy as np
rng = np.random.default_rng(7)
image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
np.save("${dir}/image.npy", image)
image.tofile("${dir}/image.bin")
features = np.array([[5.0, 3.4, 1.5, 0.2], [6.7, 3.0, 5.2, 2.3]], dtype=np.float32)
np.save("${dir}/features.npy", features)
np.save("${dir}/image64.npy", image.astype(np.float64))
# safetensors, written by hand from the format spec: u64 header length, JSON header, raw bytes.
header = json.dumps({"image": {"dtype": "F32", "shape": list(image.shape), "data_offsets": [0, image.nbytes]}}).encode()
with open("${dir}/image.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(header))); f.write(header); f.write(image.tobytes())
`,
  ]);
}

export function defineMcpSuite(kind: TransportKind): void {
  describe(`MCP over ${kind}`, { timeout: 600_000 }, () => {
    let server: Connected;
    let client: Client;
    let dir: string;

    before(async () => {
      server = await connect(kind);
      client = server.client;
      dir = server.workDir;
      makeInputs(dir);
      referenceForward('image-classifier', '1', [join(dir, 'image.npy')], join(dir, 'ref1-'));
      referenceForward('image-classifier', '2', [join(dir, 'image.npy')], join(dir, 'ref2-'));
      referenceForward('tabular-classifier', '1', [join(dir, 'features.npy')], join(dir, 'reftab-'));
    });

    after(async () => {
      await server?.close();
    });

    it('lists tools with schemas and honest annotations', async () => {
      if (kind === 'http-2026') assert.equal(client.getNegotiatedProtocolVersion(), '2026-07-28');
      const { tools } = await client.listTools();
      const byName = new Map(tools.map((t) => [t.name, t]));
      for (const name of ['list_models', 'describe_model', 'infer', 'load_model', 'unload_model']) {
        const tool = byName.get(name);
        assert.ok(tool, `${name} is listed`);
        assert.equal(tool.inputSchema.type, 'object');
        assert.ok(tool.outputSchema, `${name} has an output schema`);
        const changesState = name === 'load_model' || name === 'unload_model';
        assert.equal(tool.annotations?.readOnlyHint, !changesState, `${name} readOnlyHint`);
      }
    });

    it('lists and describes the demo models', async () => {
      const listed = await call(client, 'list_models', {});
      const models = (listed.structuredContent as { models: { name: string; versions: { state: string }[] }[] }).models;
      const names = models.map((m) => m.name);
      assert.ok(names.includes('image-classifier') && names.includes('tabular-classifier'), names.join(','));
      const image = models.find((m) => m.name === 'image-classifier');
      assert.deepEqual(
        image?.versions.map((v) => v.state),
        ['ready', 'ready'],
      );

      const described = await call(client, 'describe_model', { model: 'image-classifier' });
      const info = described.structuredContent as {
        inputs: { name: string; shape: number[] }[];
        outputs: { labels?: string[] }[];
      };
      assert.deepEqual(info.inputs[0], { name: 'image', dtype: 'float32', shape: [-1, 3, 224, 224] });
      assert.equal(info.outputs[0]?.labels?.length, 10);
    });

    it('classifies tabular rows from a nested array, with labelled top-k, equal to PyTorch', async () => {
      const features = [
        [5.0, 3.4, 1.5, 0.2],
        [6.7, 3.0, 5.2, 2.3],
      ];
      const result = await infer(client, { model: 'tabular-classifier', inputs: { features }, request_id: 'tab-1' });
      assert.equal(result.request_id, 'tab-1');
      const out = result.outputs[0];
      assert.ok(out);
      assert.deepEqual(out.shape, [2, 3]);
      const ref = readNpy(join(dir, `reftab-${out.name}.npy`));
      assertClose(await readTensor(client, out.uri), ref);
      // The summary's top-1 label per row is the label of the reference's arg-max.
      const labels = (
        (await call(client, 'describe_model', { model: 'tabular-classifier' })).structuredContent as {
          outputs: { labels: string[] }[];
        }
      ).outputs[0]?.labels as string[];
      const rows = out.summary.top as { row: number; top: { label: string; index: number }[] }[];
      assert.equal(rows.length, 2);
      for (const [r, row] of rows.entries()) {
        const refRow = [...ref.subarray(r * 3, r * 3 + 3)];
        const argmax = refRow.indexOf(Math.max(...refRow));
        assert.equal(row.top[0]?.label, labels[argmax]);
      }
      for (const stage of ['decode_ms', 'queue_ms', 'transfer_ms', 'compute_ms', 'encode_ms', 'total_ms']) {
        assert.equal(typeof result.timings[stage], 'number', stage);
      }
    });

    it('gives the same image logits for every input form, equal to PyTorch', async () => {
      const expected = readNpy(join(dir, 'ref1-logits.npy'));
      const b64 = readFileSync(join(dir, 'image.bin')).toString('base64');
      const forms: Record<string, unknown> = {
        path: { path: join(dir, 'image.npy') },
        bare_path: join(dir, 'image.npy'),
        safetensors: { path: join(dir, 'image.safetensors') },
        b64: { b64, shape: [1, 3, 224, 224], dtype: 'float32' },
        b64_unbatched: { b64, shape: [3, 224, 224] },
      };
      for (const [form, image] of Object.entries(forms)) {
        const result = await infer(client, { model: 'image-classifier', inputs: { image } });
        const out = result.outputs[0];
        assert.ok(out, form);
        assert.deepEqual(out.shape, [1, 10], form);
        assertClose(await readTensor(client, out.uri), expected);
      }
    });

    it("takes one tensor of a .safetensors file holding several: by key, by the input's name, else says which it holds", async () => {
      const expected = readNpy(join(dir, 'ref1-logits.npy'));
      const image = decodeNpy(readFileSync(join(dir, 'image.npy')));
      const noise = { dtype: 'float32' as const, shape: [2, 2], data: new Uint8Array(16) };
      const path = join(dir, 'several.safetensors');
      writeFileSync(path, encodeSafetensors({ pixels: image, image, noise }));
      for (const input of [{ path, key: 'pixels' }, { path }]) {
        const result = await infer(client, { model: 'image-classifier', inputs: { image: input } });
        assertClose(await readTensor(client, result.outputs[0]?.uri as string), expected);
      }
      await expectError(
        client,
        { model: 'image-classifier', inputs: { image: { path, key: 'nope' } } },
        'BAD_TENSOR',
        /has no tensor "nope"; it holds .*pixels.*Pass "key"/,
      );
    });

    it('accepts a large JSON array but says what it cost and what to send instead', async () => {
      const image = readNpy(join(dir, 'image.npy'));
      const nested = [
        [0, 1, 2].map((c) =>
          Array.from({ length: 224 }, (_, y) =>
            Array.from(image.subarray((c * 224 + y) * 224, (c * 224 + y + 1) * 224)),
          ),
        ),
      ];
      const raw = await call(client, 'infer', { model: 'image-classifier', inputs: { image: nested } });
      assert.notEqual(raw.isError, true, raw.content[0]?.text);
      const result = raw.structuredContent as unknown as InferOutput;
      assertClose(await readTensor(client, result.outputs[0]?.uri as string), readNpy(join(dir, 'ref1-logits.npy')));
      assert.equal(result.notes.length, 1);
      assert.match(result.notes[0] as string, /JSON array of 150528 numbers.*b64.*path/s);
      assert.match(raw.content[0]?.text ?? '', /JSON array/);
    });

    it('runs at a lower precision the model offers (bf16 autocast), close to fp32', async () => {
      const result = await infer(client, {
        model: 'image-classifier',
        inputs: { image: { path: join(dir, 'image.npy') } },
        parameters: { precision: 'bf16' },
      });
      assert.equal(result.outputs[0]?.dtype, 'float32', 'outputs keep their declared dtype');
      const got = await readTensor(client, result.outputs[0]?.uri as string);
      const expected = readNpy(join(dir, 'ref1-logits.npy'));
      const scale = Math.max(...expected.map(Math.abs));
      const worst = Math.max(...got.map((v, i) => Math.abs(v - (expected[i] as number))));
      assert.ok(worst > 0, 'bf16 really ran (results differ from fp32)');
      assert.ok(worst <= 0.1 * scale, `bf16 logits within 10% of the fp32 range: off by ${worst}, range ${scale}`);
    });

    it('serves an eager (module:factory + state_dict) version next to the .pt2 program', async () => {
      const result = await infer(client, {
        model: 'image-classifier',
        version: '2',
        inputs: { image: { path: join(dir, 'image.npy') } },
      });
      assert.equal(result.version, '2');
      assertClose(await readTensor(client, result.outputs[0]?.uri as string), readNpy(join(dir, 'ref2-logits.npy')));
    });

    it('chains an output into a later call through its tensor:// handle', async () => {
      const first = await infer(client, { model: 'adder', inputs: { a: [[1, 2, 3]], b: [[10, 20, 30]] } });
      const handle = first.outputs[0]?.uri as string;
      assert.match(handle, /^tensor:\/\//);
      const second = await infer(client, { model: 'adder', inputs: { a: { handle }, b: handle } });
      assert.deepEqual([...(await readTensor(client, second.outputs[0]?.uri as string))], [22, 44, 66]);
      const resourceLinks = (
        await call(client, 'infer', { model: 'adder', inputs: { a: [[1]], b: [[2]] } })
      ).content.filter((c) => c.type === 'resource_link');
      assert.equal(resourceLinks.length, 1);
    });

    it('takes inline tensors of several MB (past the SDK default 4 MiB HTTP body cap)', async () => {
      const rows = 1024;
      const cols = 1100; // 4.5 MB per float32 input, 12 MB of base64 in one request
      const a = new Float32Array(rows * cols).map((_, i) => i % 97);
      const b = new Float32Array(rows * cols).fill(0.5);
      const b64 = (x: Float32Array) => Buffer.from(x.buffer).toString('base64');
      const result = await infer(client, {
        model: 'adder',
        inputs: { a: { b64: b64(a), shape: [rows, cols] }, b: { b64: b64(b), shape: [rows, cols] } },
      });
      assert.deepEqual(result.outputs[0]?.shape, [rows, cols]);
      const sum = await readTensor(client, result.outputs[0]?.uri as string);
      assert.deepEqual(
        [sum[0], sum[96], sum[97], sum[rows * cols - 1]],
        [0.5, 96.5, 0.5, ((rows * cols - 1) % 97) + 0.5],
      );
    });

    it('unloads a model, loads it again on demand, and loads it explicitly', async () => {
      const unloaded = await call(client, 'unload_model', { model: 'typed' });
      assert.notEqual(unloaded.isError, true, unloaded.content[0]?.text);
      assert.equal((unloaded.structuredContent as { versions: { state: string }[] }).versions[0]?.state, 'unloaded');
      const again = await infer(client, { model: 'typed', inputs: { x: [[1, 2, 3]] } });
      assert.equal(again.outputs[0]?.dtype, 'float64');
      await call(client, 'unload_model', { model: 'typed' });
      const loaded = await call(client, 'load_model', { model: 'typed' });
      assert.equal((loaded.structuredContent as { versions: { state: string }[] }).versions[0]?.state, 'ready');
      const missing = await call(client, 'load_model', { model: 'typed', version: '9' });
      assert.equal(missing.isError, true);
      assert.match(missing.content[0]?.text ?? '', /^VERSION_NOT_FOUND/);
    });

    it('returns several named outputs of different dtypes, and non-float inputs', async () => {
      const multi = await infer(client, { model: 'multi_out', inputs: { x: [[0.5, 2.5, 1.0, -1.0]] } });
      const dtypes = Object.fromEntries(multi.outputs.map((o) => [o.name, o.dtype]));
      assert.equal(new Set(Object.values(dtypes)).size, 2, JSON.stringify(dtypes));
      const typed = await infer(client, { model: 'typed', inputs: { x: [[1, 2, 3]] } });
      assert.equal(typed.outputs[0]?.dtype, 'float64');
      assertClose(await readTensor(client, typed.outputs[0]?.uri as string), new Float64Array([2]));
    });

    it('answers every bad input with a clear error and keeps serving', async () => {
      const img = { path: join(dir, 'image.npy') };
      await expectError(client, { model: 'nope', inputs: {} }, 'MODEL_NOT_FOUND', /list_models/);
      await expectError(
        client,
        { model: 'image-classifier', version: '9', inputs: { image: img } },
        'VERSION_NOT_FOUND',
        /1, 2/,
      );
      await expectError(
        client,
        { model: 'image-classifier', inputs: { image: { path: join(dir, 'image64.npy') } } },
        'DTYPE_MISMATCH',
        /float64.*float32/,
      );
      await expectError(
        client,
        { model: 'tabular-classifier', inputs: { features: [[[[1, 2, 3, 4]]]] } },
        'SHAPE_MISMATCH',
        /-1, 4/,
      );
      await expectError(client, { model: 'tabular-classifier', inputs: { features: [[1, 2, 3]] } }, 'SHAPE_MISMATCH');
      await expectError(
        client,
        { model: 'tabular-classifier', inputs: { features: { b64: 'AAAA', shape: [1, 4] } } },
        'BYTE_LENGTH_MISMATCH',
        /16/,
      );
      await expectError(
        client,
        { model: 'tabular-classifier', inputs: { features: { b64: 'AAAAAAAAAAA*AAAAAAAAAA==', shape: [1, 4] } } },
        'BAD_TENSOR',
        /input "features".*base64/,
      );
      await expectError(
        client,
        { model: 'image-classifier', inputs: { image: { path: '/etc/hostname' } } },
        'PATH_NOT_ALLOWED',
        /allowed roots/,
      );
      await expectError(
        client,
        { model: 'image-classifier', inputs: { image: { path: join(dir, 'missing.npy') } } },
        'FILE_NOT_FOUND',
      );
      await expectError(
        client,
        { model: 'adder', inputs: { a: 'tensor://doesnotexist', b: [[1]] } },
        'HANDLE_NOT_FOUND',
        /expired/,
      );
      await expectError(
        client,
        { model: 'tabular-classifier', inputs: { features: [[1, 'x', 3, 4]] } },
        'BAD_TENSOR',
        /\[0\]\[1\]/,
      );
      const tooBig = Array.from({ length: 300_000 }, () => [0, 0, 0, 0]);
      await expectError(client, { model: 'tabular-classifier', inputs: { features: tooBig } }, 'INPUT_TOO_LARGE');
      await expectError(client, { model: 'tabular-classifier', inputs: {} }, 'MISSING_INPUT', /features/);
      await expectError(
        client,
        { model: 'tabular-classifier', inputs: { features: [[1, 2, 3, 4]], extra: [1] } },
        'UNKNOWN_INPUT',
      );
      await expectError(
        client,
        { model: 'tabular-classifier', inputs: { features: [[1, 2, 3, 4]] }, parameters: { precision: 'fp16' } },
        'BAD_PARAMETER',
        /offers/,
      );
      await expectError(
        client,
        { model: 'tabular-classifier', inputs: { features: [[1, 2, 3, 4]] }, parameters: { speed: 'max' } },
        'BAD_PARAMETER',
      );
      await expectError(
        client,
        { model: 'flaky', inputs: { x: [[-1, 0, 0, 0]] } },
        'INFERENCE_FAILED',
        /negative input/,
      );
      // The worker that raised is still serving, and so is everything else.
      const ok = await infer(client, { model: 'flaky', inputs: { x: [[1, 2, 3, 4]] } });
      assert.deepEqual([...(await readTensor(client, ok.outputs[0]?.uri as string))], [2, 3, 4, 5]);
      await infer(client, { model: 'image-classifier', inputs: { image: img } });
    });

    it('withdraws a queued call that the client cancels, so it never runs', async () => {
      const forwards = async () => {
        const listed = await call(client, 'list_models', {});
        const models = (
          listed.structuredContent as {
            models: { name: string; versions: { stats?: { batches: Record<string, number>; busy: number } }[] }[];
          }
        ).models;
        return models.find((m) => m.name === 'sleepy')?.versions[0]?.stats;
      };
      while (((await forwards())?.busy ?? 0) > 0) await new Promise((r) => setTimeout(r, 50));
      const before = Object.values((await forwards())?.batches ?? {}).reduce((a, b) => a + b, 0);
      const first = infer(client, { model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } });
      await new Promise((r) => setTimeout(r, 50));
      const abort = new AbortController();
      const second = client.callTool(
        { name: 'infer', arguments: { model: 'sleepy', inputs: { x: [[5, 6, 7, 8]] } } },
        { signal: abort.signal },
      );
      setTimeout(() => abort.abort(), 100);
      await assert.rejects(second);
      await first;
      await new Promise((r) => setTimeout(r, 700)); // long enough for a second forward, had it run
      const after = Object.values((await forwards())?.batches ?? {}).reduce((a, b) => a + b, 0);
      assert.equal(after, before + 1, 'only the first call ran');
    });

    it('keeps serving other calls while a slow model computes', async () => {
      const order: string[] = [];
      const slow = infer(client, { model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } }).then(() => order.push('sleepy'));
      await new Promise((r) => setTimeout(r, 50));
      await call(client, 'list_models', {}).then(() => order.push('list_models'));
      await infer(client, { model: 'tabular-classifier', inputs: { features: [[5, 3, 1, 0]] } }).then(() =>
        order.push('tabular'),
      );
      await slow;
      assert.deepEqual(order, ['list_models', 'tabular', 'sleepy']);
    });
  });
}
