import assert from 'node:assert/strict';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { VariantReport } from '../../src/engines/engine.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * Precision and engine variants with real parts: `mlp_variants` (TorchScript in a PyTorch worker,
 * fp32 frozen, bf16/fp16 autocast, int8 dynamic quantization, and its ONNX export run by ONNX
 * Runtime in the server) through the official MCP client and OIP v2 REST. Each request's
 * precision picks the variant and the result names it; describe_model shows every variant's
 * check and latency and why each precision goes where it goes; variants that cannot serve are
 * refused with the reason while the others serve.
 */

let served: Served;
let client: Client;

const rows = Array.from({ length: 6 }, (_, r) => Array.from({ length: 4 }, (_, c) => ((r * 5 + c * 3) % 11) / 5.5 - 1));

type Variant = VariantReport;
interface Described {
  versions: {
    state: string;
    error?: string;
    variants?: Variant[];
    engine_choice?: { precision: string; variant: string | null; why: string }[];
  }[];
}

async function describe_(model: string): Promise<{ info: Described['versions'][number]; text: string }> {
  const result = await client.callTool({ name: 'describe_model', arguments: { model } });
  assert.notEqual(result.isError, true, JSON.stringify(result.content));
  const info = (result.structuredContent as Described).versions[0] as Described['versions'][number];
  return { info, text: (result.content as { text: string }[])[0]?.text ?? '' };
}

/** describe_model once the version has loaded, checked its onnx export and measured its variants. */
async function settled(model: string) {
  for (let i = 0; ; i++) {
    const described = await describe_(model);
    if (described.info.state === 'failed') throw new Error(`${model} failed to load: ${described.info.error}`);
    const variants = described.info.variants ?? [];
    const onnx = variants.find((v) => v.engine === 'onnx');
    const measuring = variants.some((v) => v.state === 'ready' && v.latency_ms === undefined);
    if (variants.length > 0 && onnx?.reason !== 'still loading' && (!measuring || i > 300)) return described;
    if (i > 600) throw new Error(`${model} did not settle: ${JSON.stringify(described.info)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function mcpInfer(model: string, parameters: Record<string, unknown>) {
  const result = await client.callTool({ name: 'infer', arguments: { model, inputs: { x: rows }, parameters } });
  if (result.isError) return { error: (result.content as { text: string }[])[0]?.text ?? '' };
  const out = result.structuredContent as { variant: string; outputs: { uri: string }[] };
  const resource = await client.readResource({ uri: out.outputs[0]?.uri as string });
  const npy = Buffer.from((resource.contents[0] as { blob: string }).blob, 'base64');
  const data = new Uint8Array(npy.subarray(10 + npy.readUInt16LE(8))).buffer;
  return { variant: out.variant, logits: [...new Float32Array(data)] };
}

async function oipInfer(model: string, parameters: Record<string, unknown>) {
  const res = await fetch(`${served.base}/v2/models/${model}/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      inputs: [{ name: 'x', shape: [rows.length, 4], datatype: 'FP32', data: rows.flat() }],
      parameters,
    }),
  });
  const body = (await res.json()) as {
    error?: string;
    parameters?: { variant?: string };
    outputs?: { data: number[] }[];
  };
  return { status: res.status, ...body };
}

/** Every element within tolerance * (1 + |expected|), and the largest difference. */
function within(actual: number[], expected: number[], tolerance: number): number {
  assert.equal(actual.length, expected.length);
  let worst = 0;
  actual.forEach((a, i) => {
    const e = expected[i] as number;
    const diff = Math.abs(a - e);
    worst = Math.max(worst, diff);
    assert.ok(diff <= tolerance * (1 + Math.abs(e)), `element ${i}: ${a} vs ${e} (tolerance ${tolerance})`);
  });
  return worst;
}

describe('precision and engine variants', { timeout: 240_000 }, () => {
  before(async () => {
    served = await serveOne(['mlp_variants', 'mlp']);
    client = new Client({ name: 'variants-test', version: '0.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(served.url)));
    // load_model answers once the variants are checked and their latencies measured.
    const loaded = await client.callTool({ name: 'load_model', arguments: { model: 'mlp_variants' } });
    assert.notEqual(loaded.isError, true, JSON.stringify(loaded.content));
  });

  after(async () => {
    await client?.close();
    await served?.stop();
  });

  it('describe_model shows every variant with its check, latency and the engine choice', async () => {
    const { info, text } = await settled('mlp_variants');
    const byId = new Map((info.variants ?? []).map((v) => [`${v.engine}-${v.precision}`, v]));
    assert.deepEqual(
      [...byId.keys()].sort(),
      ['onnx-fp32', 'torch-bf16', 'torch-fp16', 'torch-fp32', 'torch-int8'],
      JSON.stringify(info.variants),
    );
    const fp32 = byId.get('torch-fp32') as Variant;
    assert.equal(fp32.method, 'freeze');
    assert.ok((fp32.error ?? 1) <= 1e-4, `frozen fp32 agrees with plain: ${fp32.error}`);
    assert.ok((fp32.build_ms ?? 0) > 0, 'its build time is shown');
    const int8 = byId.get('torch-int8') as Variant;
    assert.equal(int8.state, 'ready');
    assert.match(int8.method, /dynamic quantization/);
    assert.equal(int8.rule, 'values');
    assert.ok((int8.error ?? 0) > 0 && (int8.error ?? 1) < 0.05, `int8 is close, not equal: ${int8.error}`);
    assert.equal(int8.compared, 12, 'the check ran 4 rows of 3 logits');
    const onnx = byId.get('onnx-fp32') as Variant;
    assert.equal(onnx.state, 'ready', JSON.stringify(onnx));
    assert.ok((onnx.max_abs ?? 1) <= 1e-5, `onnx agrees with torch: ${onnx.max_abs}`);
    // torch 2.x runs autocast fp16 on a CPU too.
    for (const p of ['bf16', 'fp16']) assert.equal(byId.get(`torch-${p}`)?.state, 'ready', p);
    for (const v of byId.values())
      if (v.state === 'ready') assert.ok((v.latency_ms ?? 0) > 0, `${v.engine}-${v.precision} measured`);

    const choice = new Map((info.engine_choice ?? []).map((c) => [c.precision, c]));
    assert.equal(choice.get('fp32')?.variant, 'onnx-fp32');
    assert.match(choice.get('fp32')?.why ?? '', /agrees with PyTorch .* runs in the gateway/);
    assert.equal(choice.get('int8')?.variant, 'torch-int8');
    assert.match(
      choice.get('int8')?.why ?? '',
      /dynamic quantization .*; vs fp32: error \S+ of its spread, tolerance 0\.05; built in \d+ ms/,
    );
    assert.match(text, /Variants: fp32 → onnx-fp32/);
  });

  it('the precision picks the variant, the result names it, and outputs agree within each tolerance', async () => {
    await settled('mlp_variants');
    const reference = await mcpInfer('mlp_variants', { engine: 'torch' });
    assert.equal(reference.variant, 'torch-fp32');
    const reference_ = reference.logits as number[];
    assert.ok(new Set(reference_.map((v) => v.toFixed(3))).size > 3, 'the outputs depend on the input');

    const onnx = await mcpInfer('mlp_variants', {});
    assert.equal(onnx.variant, 'onnx-fp32');
    within(onnx.logits as number[], reference_, 1e-5);

    const int8 = await mcpInfer('mlp_variants', { precision: 'int8' });
    assert.equal(int8.variant, 'torch-int8');
    assert.ok(within(int8.logits as number[], reference_, 0.05) > 0, 'int8 really ran quantized');

    const bf16 = await mcpInfer('mlp_variants', { precision: 'bf16' });
    assert.equal(bf16.variant, 'torch-bf16');
    within(bf16.logits as number[], reference_, 0.05);

    const oip = await oipInfer('mlp_variants', { precision: 'int8' });
    assert.equal(oip.status, 200, oip.error);
    assert.equal(oip.parameters?.variant, 'torch-int8');
    within(oip.outputs?.[0]?.data ?? [], int8.logits as number[], 1e-6);
    const oipOnnx = await oipInfer('mlp_variants', {});
    assert.equal(oipOnnx.parameters?.variant, 'onnx-fp32');
    within(oipOnnx.outputs?.[0]?.data ?? [], reference_, 1e-5);
  });

  it("Prometheus's stage histograms count each request under the variant that ran it", async () => {
    await settled('mlp_variants');
    /** `tensorgate_request_stage_seconds_count` of mlp_variants' total stage, per variant. */
    const counts = async () => {
      const text = await (await fetch(`${served.base}/metrics`)).text();
      const found = new Map<string, number>();
      for (const [, labels, value] of text.matchAll(/^tensorgate_request_stage_seconds_count\{([^}]*)\} (\S+)$/gm)) {
        const label = (name: string) => new RegExp(`${name}="([^"]*)"`).exec(labels as string)?.[1];
        if (label('model') === 'mlp_variants' && label('stage') === 'total')
          found.set(label('variant') as string, Number(value));
      }
      return found;
    };
    const before = await counts();
    for (let i = 0; i < 3; i++) await oipInfer('mlp_variants', { precision: 'int8' });
    await mcpInfer('mlp_variants', { precision: 'bf16' });
    for (let i = 0; i < 2; i++) await oipInfer('mlp_variants', {});
    const after = await counts();
    const delta = (variant: string) => (after.get(variant) ?? 0) - (before.get(variant) ?? 0);
    assert.deepEqual(
      ['torch-int8', 'torch-bf16', 'onnx-fp32', 'torch-fp32'].map(delta),
      [3, 1, 2, 0],
      JSON.stringify([...after]),
    );
  });

  it('a precision or engine the model lacks is refused with the reason, and the rest keeps serving', async () => {
    await settled('mlp_variants');
    assert.equal((await oipInfer('mlp_variants', { precision: 'fp16' })).parameters?.variant, 'torch-fp16');
    const onnxInt8 = await mcpInfer('mlp_variants', { precision: 'int8', engine: 'onnx' });
    assert.match(onnxInt8.error ?? '', /VARIANT_UNAVAILABLE.*the onnx variant runs fp32 only/);
    const noOnnx = await oipInfer('mlp', { engine: 'onnx' });
    assert.equal(noOnnx.status, 422);
    assert.match(noOnnx.error ?? '', /mlp@1: it has no onnx variant; its engines are torch/);
    const notOffered = await oipInfer('mlp', { precision: 'int8' });
    assert.equal(notOffered.status, 400);
    assert.match(notOffered.error ?? '', /BAD_PARAMETER: model "mlp" does not offer precision int8; it offers fp32/);
    const unknown = await mcpInfer('mlp_variants', { precision: 'int4' });
    assert.match(unknown.error ?? '', /BAD_PARAMETER.*precision must be one of fp32, bf16, fp16, int8/);
    assert.equal((await mcpInfer('mlp_variants', {})).variant, 'onnx-fp32');
  });

  it('variants past their tolerance are rejected with the error measured; fp32 falls back to torch', async () => {
    const models = join(served.work, 'models');
    const strict = join(models, 'mlp_strict');
    cpSync(join(models, 'mlp_variants'), strict, { recursive: true });
    const config = JSON.parse(readFileSync(join(strict, 'config.json'), 'utf8'));
    config.name = 'mlp_strict';
    config.versions['1'].onnx = 'perturbed.onnx';
    config.validation = { tolerance: { int8: 1e-9 } };
    writeFileSync(join(strict, 'config.json'), JSON.stringify(config));
    const load = await fetch(`${served.base}/v2/repository/models/mlp_strict/load`, { method: 'POST' });
    assert.equal(load.status, 200);

    const { info } = await settled('mlp_strict');
    const byId = new Map((info.variants ?? []).map((v) => [`${v.engine}-${v.precision}`, v]));
    const onnx = byId.get('onnx-fp32') as Variant;
    assert.equal(onnx.state, 'rejected');
    // Weights + 0.01 move the logits by a large part of their spread: a changed model, rejected.
    assert.match(
      onnx.reason ?? '',
      /^it changes the answers: output "logits" is off from PyTorch fp32 by up to \S+, \S+ of its spread \(tolerance 0\.0001\)$/,
    );
    assert.ok((onnx.error ?? 0) > 0.01, `the perturbed export is far off: ${onnx.error}`);
    const int8 = byId.get('torch-int8') as Variant;
    assert.equal(int8.state, 'rejected');
    assert.match(
      int8.reason ?? '',
      /^it changes the answers: output "logits" is off from fp32 by up to \S+, \S+ of its spread \(tolerance 1e-09\)$/,
    );
    assert.match(
      info.engine_choice?.find((c) => c.precision === 'fp32')?.why ?? '',
      /the onnx variant is rejected: it changes the answers: output "logits"/,
    );

    const fp32 = await oipInfer('mlp_strict', {});
    assert.equal(fp32.status, 200);
    assert.equal(fp32.parameters?.variant, 'torch-fp32');
    const refused = await oipInfer('mlp_strict', { precision: 'int8' });
    assert.equal(refused.status, 422);
    assert.match(
      refused.error ?? '',
      /^VARIANT_UNAVAILABLE: mlp_strict@1: precision int8 .* is rejected: it changes the answers: output "logits"/,
    );
    const onnxAsked = await mcpInfer('mlp_strict', { engine: 'onnx' });
    assert.match(onnxAsked.error ?? '', /the onnx variant is rejected/);
    assert.equal((await oipInfer('mlp_variants', { precision: 'int8' })).parameters?.variant, 'torch-int8');
  });
});
