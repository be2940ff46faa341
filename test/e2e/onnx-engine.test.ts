import assert from 'node:assert/strict';
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * The onnx engine with real parts: `mlp` (TorchScript, a PyTorch worker) and `mlp_onnx` (the same
 * weights exported with torch.onnx.export, run by ONNX Runtime inside the server) answer the same
 * inputs alike through the official MCP client and OIP v2 REST with binary tensors; concurrent
 * calls are batched; a graph that does not match its config, or is not a graph at all, fails to
 * load with the reason while the rest keeps serving.
 */

let served: Served;
let client: Client;

/** 8 rows of 4 reproducible values in [-2, 2). */
const rows = Array.from({ length: 8 }, (_, r) =>
  Array.from({ length: 4 }, (_, c) => ((r * 7 + c * 13) % 17) / 4.25 - 2),
);

interface InferOut {
  batch_size: number;
  outputs: { name: string; uri: string }[];
}

async function infer(model: string, x: number[][]): Promise<{ logits: number[][]; label: number[]; batch: number }> {
  const result = await client.callTool({ name: 'infer', arguments: { model, inputs: { x } } });
  assert.notEqual(result.isError, true, JSON.stringify(result.content));
  const out = result.structuredContent as InferOut;
  const read = async (name: string) => {
    const uri = out.outputs.find((o) => o.name === name)?.uri as string;
    const resource = await client.readResource({ uri });
    const blob = (resource.contents[0] as { blob: string }).blob;
    return Buffer.from(blob, 'base64');
  };
  const logits = npyValues(await read('logits'), 'f4') as number[];
  const label = npyValues(await read('label'), 'i8') as number[];
  return {
    logits: Array.from({ length: x.length }, (_, r) => logits.slice(r * 3, r * 3 + 3)),
    label,
    batch: out.batch_size,
  };
}

/** The values of a little-endian .npy file of float32 ('f4') or int64 ('i8'). */
function npyValues(npy: Buffer, kind: 'f4' | 'i8'): number[] {
  const headerLength = npy.readUInt16LE(8);
  const data = npy.subarray(10 + headerLength);
  const copy = new Uint8Array(data).buffer;
  return kind === 'f4' ? [...new Float32Array(copy)] : [...new BigInt64Array(copy)].map(Number);
}

async function oipInfer(model: string, x: number[][]) {
  const flat = new Float32Array(x.flat());
  const header = Buffer.from(
    JSON.stringify({
      inputs: [
        { name: 'x', shape: [x.length, 4], datatype: 'FP32', parameters: { binary_data_size: flat.byteLength } },
      ],
      outputs: [{ name: 'logits', parameters: { binary_data: true } }],
    }),
  );
  const res = await fetch(`${served.base}/v2/models/${model}/infer`, {
    method: 'POST',
    headers: { 'inference-header-content-length': String(header.length), 'content-type': 'application/octet-stream' },
    body: Buffer.concat([header, Buffer.from(flat.buffer)]),
  });
  assert.equal(res.status, 200);
  const body = Buffer.from(await res.arrayBuffer());
  const length = Number(res.headers.get('inference-header-content-length'));
  return [...new Float32Array(new Uint8Array(body.subarray(length)).buffer)];
}

function assertClose(actual: number[], expected: number[], what: string): void {
  assert.equal(actual.length, expected.length, what);
  actual.forEach((v, i) => {
    assert.ok(Math.abs(v - (expected[i] as number)) <= 1e-5, `${what}[${i}]: ${v} vs ${expected[i]}`);
  });
}

describe('the onnx engine (ONNX Runtime in the server process)', { timeout: 180_000 }, () => {
  before(async () => {
    served = await serveOne(['mlp', 'mlp_onnx']);
    client = new Client({ name: 'onnx-engine-test', version: '0.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(served.url)));
    for (const model of ['mlp', 'mlp_onnx'])
      for (let i = 0; (await fetch(`${served.base}/v2/models/${model}/ready`)).status !== 200; i++) {
        if (i > 600) throw new Error(`${model} did not become ready`);
        await new Promise((r) => setTimeout(r, 100));
      }
  });

  after(async () => {
    await client?.close();
    await served?.stop();
  });

  it('answers as the PyTorch model does, through MCP and OIP v2 binary tensors', async () => {
    const [torch, onnx] = await Promise.all([infer('mlp', rows), infer('mlp_onnx', rows)]);
    assertClose(onnx.logits.flat(), torch.logits.flat(), 'MCP logits');
    assert.deepEqual(onnx.label, torch.label);
    // The labels are not all alike: the comparison would catch a model that ignores its input.
    assert.ok(new Set(torch.label).size > 1, `labels ${torch.label}`);
    const [torchOip, onnxOip] = await Promise.all([oipInfer('mlp', rows), oipInfer('mlp_onnx', rows)]);
    assertClose(onnxOip, torchOip, 'OIP logits');
    assertClose(onnxOip, torch.logits.flat(), 'OIP against MCP');

    const metadata = (await (await fetch(`${served.base}/v2/models/mlp_onnx`)).json()) as { platform: string };
    assert.equal(metadata.platform, 'onnxruntime_onnx');
    const described = await client.callTool({ name: 'describe_model', arguments: { model: 'mlp_onnx' } });
    const info = described.structuredContent as {
      engine: string;
      versions: { state: string; device?: string; variants?: { method: string }[] }[];
    };
    assert.equal(info.engine, 'onnx');
    assert.deepEqual([info.versions[0]?.state, info.versions[0]?.device], ['ready', 'cpu']);
    // A 4-16-3 MLP computes a full batch in microseconds: its passes skip the thread hop, and the
    // answers above (an aligned MCP input, an unaligned binary OIP one) came from that session.
    // The engine chooses that from probe passes timed at load, so a host busy loading the other
    // models may keep every pass in the session's thread: the method line says which it chose.
    assert.match(
      info.versions[0]?.variants?.[0]?.method ?? '',
      /^ONNX Runtime, graph optimization all(; passes of up to 16 rows run on the gateway's thread \(\S+ ms each\), larger ones in the session's thread)?$/,
    );
    assert.match((described.content as { text: string }[])[0]?.text ?? '', /Runs in ONNX Runtime inside the server/);
  });

  it('batches concurrent calls through the scheduler like any engine', async () => {
    const results = await Promise.all(rows.map((row) => infer('mlp_onnx', [row, row])));
    const alone = await infer('mlp_onnx', rows);
    results.forEach((r, i) => {
      assertClose(r.logits[0] ?? [], alone.logits[i] ?? [], `row ${i}`);
    });
    assert.ok(
      results.some((r) => r.batch > 2),
      `some calls shared a forward pass: ${results.map((r) => r.batch)}`,
    );
  });

  it('a graph that does not match its config, or is no graph, fails to load with the reason; the rest keeps serving', async () => {
    const models = join(served.work, 'models');
    const renamed = join(models, 'mlp_renamed');
    cpSync(join(models, 'mlp_onnx'), renamed, { recursive: true });
    writeFileSync(
      join(renamed, 'config.json'),
      JSON.stringify({
        name: 'mlp_renamed',
        engine: 'onnx',
        inputs: [{ name: 'features', dtype: 'float32', shape: [-1, 5] }],
        outputs: [
          { name: 'logits', dtype: 'float64', shape: [-1, 3] },
          { name: 'label', dtype: 'int64', shape: [-1] },
        ],
        versions: { '1': { format: 'onnx', file: 'model.onnx' } },
      }),
    );
    const renamedLoad = await fetch(`${served.base}/v2/repository/models/mlp_renamed/load`, { method: 'POST' });
    const renamedError = ((await renamedLoad.json()) as { error: string }).error;
    assert.match(renamedError, /^LOAD_FAILED: mlp_renamed@1: .*model\.onnx does not match config\.json: /);
    for (const problem of [
      'input "features" is not in the graph (it has x)',
      'output "logits" is float32 in the graph, float64 in the config',
      `the graph's input "x" is not in the config`,
    ])
      assert.ok(renamedError.includes(problem), `${problem} in ${renamedError}`);

    const broken = join(models, 'mlp_broken');
    cpSync(join(models, 'mlp_onnx'), broken, { recursive: true });
    writeFileSync(join(broken, 'config.json'), JSON.stringify({ ...configOf('mlp_broken') }));
    writeFileSync(join(broken, '1', 'model.onnx'), 'not a graph');
    const brokenLoad = await fetch(`${served.base}/v2/repository/models/mlp_broken/load`, { method: 'POST' });
    assert.match(
      ((await brokenLoad.json()) as { error: string }).error,
      /^LOAD_FAILED: mlp_broken@1: ONNX Runtime cannot load/,
    );

    const still = await infer('mlp_onnx', rows.slice(0, 2));
    assert.equal(still.logits.length, 2);
  });
});

function configOf(name: string) {
  return {
    name,
    engine: 'onnx',
    inputs: [{ name: 'x', dtype: 'float32', shape: [-1, 4] }],
    outputs: [
      { name: 'logits', dtype: 'float32', shape: [-1, 3] },
      { name: 'label', dtype: 'int64', shape: [-1] },
    ],
    versions: { '1': { format: 'onnx', file: 'model.onnx' } },
  };
}
