import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { VariantReport } from '../../src/engines/engine.js';
import { fromNestedArray } from '../../src/tensor/nested.js';
import { encodeNpy } from '../../src/tensor/npy.js';
import { ROOT, referenceForward } from '../helpers/models.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * Current PyTorch's ways of shipping a model, served by real workers and called through the
 * official MCP client and OIP v2 REST: a torch.export program (`mlp`, .pt2 with a dynamic batch),
 * an AOTInductor package made by `tensorgate export --format aoti` (`mlp-aoti`), eager code whose
 * fp32 is torch.compile'd (`mlp_compile`), a program whose fp32 is an AOTInductor package compiled
 * at load and cached (`mlp_aoti`), and a TorchScript file asked to compile, which torch.compile
 * refuses: the variant is unavailable with the reason and the model serves plain fp32. Every
 * answer is compared with a plain PyTorch forward of the same program (test/fixtures/reference_forward.py).
 */

const run = promisify(execFile);
const CLI = join(ROOT, 'bin', 'tensorgate.js');
const MODELS = ['mlp', 'mlp-aoti', 'mlp_compile', 'mlp_aoti'];
const rows = [
  [0.5, -1, 2, 0.25],
  [-3, 1.5, 0, 1],
  [0.1, 0.2, 0.3, 0.4],
];

interface Described {
  versions: { state: string; error?: string; variants?: VariantReport[]; engine_choice?: { why: string }[] }[];
}

describe('current PyTorch: .pt2 programs, AOTInductor packages, torch.compile, TorchScript', {
  timeout: 600_000,
}, () => {
  let served: Served;
  let client: Client;
  let cache: string;
  let expected: { logits: number[]; label: number[] };

  const start = async () => {
    served = await serveOne(['mlp', 'mlp_compile', 'mlp_aoti', 'adder'], {
      globalArgs: ['--cache-dir', cache],
      prepare: async (models) => {
        const adder = join(models, 'adder', 'config.json');
        const config = JSON.parse(readFileSync(adder, 'utf8'));
        writeFileSync(adder, JSON.stringify({ ...config, optimization: { torch: 'compile' } }));
        await run(process.execPath, [
          CLI,
          ...['--registry', join(models, '..', 'export.db'), 'export', join(models, 'mlp')],
          ...['--format', 'aoti', '--out', join(models, 'mlp-aoti')],
        ]);
      },
    });
    client = new Client({ name: 'torch-formats-test', version: '0.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(served.url)));
  };

  const describeModel = async (model: string) => {
    const result = await client.callTool({ name: 'describe_model', arguments: { model } });
    assert.notEqual(result.isError, true, JSON.stringify(result.content));
    return (result.structuredContent as Described).versions[0] as Described['versions'][number];
  };

  const fp32Of = async (model: string) => {
    const info = await describeModel(model);
    assert.equal(info.state, 'ready', `${model}: ${info.error}`);
    return info.variants?.find((v) => v.precision === 'fp32') as VariantReport;
  };

  before(async () => {
    cache = mkdtempSync(join(tmpdir(), 'tg-cache-'));
    const work = mkdtempSync(join(tmpdir(), 'tg-formats-'));
    const input = join(work, 'x.npy');
    writeFileSync(input, encodeNpy(fromNestedArray(rows, 'float32')));
    referenceForward('mlp', '1', [input], join(work, 'ref-'));
    const values = (name: string) => {
      const npy = readFileSync(join(work, `ref-${name}.npy`));
      const body = npy.subarray(10 + npy.readUInt16LE(8));
      const data = new Uint8Array(body).buffer;
      return name === 'label' ? [...new BigInt64Array(data)].map(Number) : [...new Float32Array(data)];
    };
    expected = { logits: values('logits'), label: values('label') };
    await start();
  });

  after(async () => {
    await client?.close();
    await served?.stop();
  });

  it('serves each one through MCP and OIP with the answers of a plain PyTorch forward', async () => {
    for (const model of MODELS) {
      const result = await client.callTool({ name: 'infer', arguments: { model, inputs: { x: rows } } });
      assert.notEqual(result.isError, true, `${model}: ${JSON.stringify(result.content)}`);
      const out = result.structuredContent as {
        variant: string;
        outputs: { name: string; summary: { values: number[] | number[][] } }[];
      };
      assert.equal(out.variant, 'torch-fp32', model);
      const logits = ((out.outputs.find((o) => o.name === 'logits')?.summary.values ?? []) as number[][]).flat();
      logits.forEach((v, i) => {
        assert.ok(Math.abs(v - (expected.logits[i] as number)) < 1e-5, `${model} MCP logits[${i}]`);
      });
      assert.deepEqual(out.outputs.find((o) => o.name === 'label')?.summary.values, expected.label, model);

      const res = await fetch(`${served.base}/v2/models/${model}/infer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ inputs: [{ name: 'x', shape: [3, 4], datatype: 'FP32', data: rows.flat() }] }),
      });
      assert.equal(res.status, 200, `${model}: ${await res.clone().text()}`);
      const body = (await res.json()) as { outputs: { name: string; datatype: string; data: number[] }[] };
      const oip = new Map(body.outputs.map((o) => [o.name, o]));
      oip.get('logits')?.data.forEach((v, i) => {
        assert.ok(Math.abs(v - (expected.logits[i] as number)) < 1e-5, `${model} OIP logits[${i}]`);
      });
      assert.equal(oip.get('label')?.datatype, 'INT64');
      assert.deepEqual(oip.get('label')?.data, expected.label, model);
    }
  });

  it('describe_model says how each fp32 is built, what building it cost, and what its check found', async () => {
    const compiled = await fp32Of('mlp_compile');
    assert.equal(compiled.state, 'ready');
    assert.equal(compiled.method, 'torch.compile (mode default)');
    assert.ok((compiled.build_ms ?? 0) > 0, 'compile time shown');
    assert.equal(compiled.rule, 'values');
    assert.ok((compiled.error ?? 1) <= 1e-4, JSON.stringify(compiled));

    const aoti = await fp32Of('mlp_aoti');
    assert.equal(aoti.method, 'AOTInductor package for cpu', JSON.stringify(aoti));
    assert.equal(aoti.cached, false);
    assert.ok((aoti.build_ms ?? 0) > 0);

    const packaged = await fp32Of('mlp-aoti');
    assert.equal(packaged.method, 'plain');

    // TorchScript asked to compile: the variant cannot be built, the model serves plain fp32.
    const adder = await fp32Of('adder');
    assert.equal(adder.method, 'plain');
    assert.match(
      adder.reason ?? '',
      /torch\.compile \(mode default\) was not used: it is unavailable \(torch\.compile does not take TorchScript modules/,
    );
    const sum = await client.callTool({
      name: 'infer',
      arguments: { model: 'adder', inputs: { a: [[1, 2]], b: [[3, 4]] } },
    });
    assert.notEqual(sum.isError, true, JSON.stringify(sum.content));
    assert.deepEqual(
      (sum.structuredContent as { outputs: { summary: { values: number[][] } }[] }).outputs[0]?.summary.values,
      [[4, 6]],
    );
  });

  it('batches concurrent calls into one compiled forward pass, each caller getting its rows', async () => {
    const calls = rows.map((row) =>
      client.callTool({ name: 'infer', arguments: { model: 'mlp_compile', inputs: { x: [row] } } }),
    );
    const results = await Promise.all(calls);
    let batched = 0;
    results.forEach((result, r) => {
      assert.notEqual(result.isError, true, JSON.stringify(result.content));
      const out = result.structuredContent as {
        batch_size: number;
        outputs: { name: string; summary: { values: number[][] } }[];
      };
      batched = Math.max(batched, out.batch_size);
      const logits = out.outputs.find((o) => o.name === 'logits')?.summary.values.flat() ?? [];
      logits.forEach((v, i) => {
        assert.ok(Math.abs(v - (expected.logits[r * 3 + i] as number)) < 1e-5, `row ${r} logits[${i}]`);
      });
    });
    assert.ok(batched > 1, `calls in flight together ran as one batch (largest ${batched})`);
  });

  it('a restart takes the AOTInductor package from the cache instead of compiling again', async () => {
    await client.close();
    await served.stop();
    await start();
    const loaded = await client.callTool({ name: 'load_model', arguments: { model: 'mlp_aoti' } });
    assert.notEqual(loaded.isError, true, JSON.stringify(loaded.content));
    const aoti = await fp32Of('mlp_aoti');
    assert.equal(aoti.cached, true, JSON.stringify(aoti));
    assert.equal(aoti.method, 'AOTInductor package for cpu (from the cache)');
    const result = await client.callTool({ name: 'infer', arguments: { model: 'mlp_aoti', inputs: { x: rows } } });
    const out = result.structuredContent as { outputs: { name: string; summary: { values: number[] } }[] };
    assert.deepEqual(out.outputs.find((o) => o.name === 'label')?.summary.values, expected.label);
  });
});
