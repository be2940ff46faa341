import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { eagerModel as eagerModelIn, ensureTestModels, ROOT } from '../helpers/models.js';

/**
 * `tensorgate export` and `tensorgate init` with real parts. ONNX: PyTorch exports (a .pt2 program
 * with a dict of outputs), ONNX Runtime checks the export against PyTorch's answers, the new folder
 * registers and serves on the onnx engine with the torch model's outputs; a model with an operator
 * ONNX lacks fails with the operator named and leaves nothing behind. torch.export: a TorchScript
 * file becomes a .pt2 program that answers as it did; data-dependent control flow fails with
 * torch's reason. init: a config.json from a .pt2 program, from TorchScript with example inputs,
 * and for a folder registered without one.
 */

const run = promisify(execFile);
const CLI = [join(ROOT, 'bin', 'tensorgate.js')];

const x = JSON.stringify([
  [0.5, -1, 2, 0.25],
  [-3, 1.5, 0, 1],
]);

describe('tensorgate export and init', { timeout: 300_000 }, () => {
  let work: string;
  let global: string[];

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'tg-export-'));
    cpSync(join(ensureTestModels(), 'mlp'), join(work, 'mlp'), { recursive: true });
    global = ['--registry', join(work, 'r.db'), '--models', join(work, 'none'), '--audit-log', join(work, 'a.jsonl')];
  });

  const answer = async (model: string) => {
    const out = await run(process.execPath, [...CLI, ...global, 'infer', model, '-i', `x=${x}`, '--json']);
    return JSON.parse(out.stdout) as { outputs: { name: string; summary: { values: number[] | number[][] } }[] };
  };

  it('exports a .pt2 program to ONNX, checks it against PyTorch, registers it, and it answers as PyTorch does', async () => {
    const { stdout } = await run(process.execPath, [...CLI, ...global, 'export-onnx', join(work, 'mlp'), '--register']);
    assert.match(stdout, /^exported mlp@1 to .*mlp-onnx \(ONNX opset \d+\)$/m);
    assert.match(stdout, /^ {2}logits: error \S+ of its spread, max \|onnx - torch\| \S+ \(tolerance 0\.0001\)$/m);
    assert.match(stdout, /^ {2}label: 0 of 3 elements differ \(tolerance 0\.0001\)$/m);
    assert.match(stdout, /^mlp-onnx@1: ready \(/m);
    assert.match(stdout, /^ {2}fp32 → onnx-fp32: ONNX Runtime, graph optimization all/m);
    const config = JSON.parse(readFileSync(join(work, 'mlp-onnx', 'config.json'), 'utf8'));
    assert.equal(config.engine, 'onnx');
    assert.deepEqual(config.versions, { '1': { format: 'onnx', file: 'model.onnx' } });

    await run(process.execPath, [...CLI, ...global, 'register', join(work, 'mlp')]);
    const [torch, onnx] = [await answer('mlp'), await answer('mlp-onnx')];
    const values = (r: typeof torch, name: string) => r.outputs.find((o) => o.name === name)?.summary.values;
    assert.deepEqual(values(onnx, 'label'), values(torch, 'label'));
    const t = (values(torch, 'logits') as number[][]).flat();
    const o = (values(onnx, 'logits') as number[][]).flat();
    t.forEach((v, i) => {
      assert.ok(Math.abs(v - (o[i] as number)) < 1e-5, `logits[${i}]: ${v} vs ${o[i]}`);
    });
  });

  /** An eager model folder whose forward is `body` (Python lines computing from x), with 2 outputs per row. */
  const eagerModel = (name: string, body: string) =>
    eagerModelIn(
      work,
      name,
      [
        'import torch',
        '',
        '',
        'class M(torch.nn.Module):',
        '    def forward(self, x):',
        body,
        '',
        '',
        'def build():',
        '    return M()',
        '',
      ],
      { outputs: [{ name: 'y', dtype: 'float32', shape: [-1, 2] }] },
    );

  it('an operator ONNX lacks: EXPORT_FAILED naming it, and nothing written', async () => {
    const dir = eagerModel('eig', '        return torch.linalg.eigvals(x.reshape(-1, 2, 2)).real');
    await assert.rejects(run(process.execPath, [...CLI, ...global, 'export-onnx', dir]), (err: { stderr: string }) => {
      assert.match(
        err.stderr,
        /^tensorgate: EXPORT_FAILED: eig@1 cannot be exported to ONNX: No ONNX function found for .*aten\.linalg_eig/m,
      );
      return true;
    });
    assert.equal(existsSync(join(work, 'eig-onnx')), false);
  });

  it('turns a TorchScript file into a .pt2 program that answers as it did', async () => {
    cpSync(join(ensureTestModels(), 'adder'), join(work, 'adder'), { recursive: true });
    const { stdout } = await run(process.execPath, [
      ...CLI,
      ...global,
      'export',
      join(work, 'adder'),
      '--format',
      'export',
    ]);
    assert.match(stdout, /^exported adder@1 to .*adder-export \(torch 2\.\S+, cpu\)$/m);
    assert.match(stdout, /^ {2}sum: error 0 of its spread, max \|export - torch\| 0 \(tolerance 0\.0001\)$/m);
    const config = JSON.parse(readFileSync(join(work, 'adder-export', 'config.json'), 'utf8'));
    assert.deepEqual(config.versions, { '1': { format: 'export', file: 'model.pt2' } });
    await run(process.execPath, [...CLI, ...global, 'register', join(work, 'adder-export')]);
    const out = await run(process.execPath, [
      ...CLI,
      ...global,
      ...['infer', 'adder-export', '-i', 'a=[[1,2,3],[4,5,6]]', '-i', 'b=[[10,20,30],[40,50,60]]', '--json'],
    ]);
    const result = JSON.parse(out.stdout) as { outputs: { summary: { values: number[][] } }[] };
    assert.deepEqual(result.outputs[0]?.summary.values, [
      [11, 22, 33],
      [44, 55, 66],
    ]);
  });

  it("control flow that depends on the data cannot be exported: EXPORT_FAILED with torch's reason", async () => {
    const dir = eagerModel('branchy', '        if x.sum() > 0:\n            return x[:, :2]\n        return -x[:, :2]');
    await assert.rejects(
      run(process.execPath, [...CLI, ...global, 'export', dir, '--format', 'aoti']),
      (err: { stderr: string }) => {
        assert.match(
          err.stderr,
          /^tensorgate: EXPORT_FAILED: branchy@1 cannot be exported as an AOTInductor package: torch\.export failed: Could not guard on data-dependent expression/m,
        );
        return true;
      },
    );
    assert.equal(existsSync(join(work, 'branchy-aoti')), false);
  });

  it('init writes a config.json from a .pt2 program, and one from TorchScript with example inputs', async () => {
    const loose = join(work, 'loose');
    mkdirSync(loose);
    cpSync(join(ensureTestModels(), 'mlp', '1', 'model.pt2'), join(loose, 'classifier.pt2'));
    const models = join(work, 'init-models');
    const { stdout } = await run(process.execPath, [
      ...CLI,
      ...global,
      'init',
      join(loose, 'classifier.pt2'),
      '--out',
      models,
    ]);
    assert.match(
      stdout,
      /^wrote .*init-models\/classifier\/config\.json \(export\): inputs x float32\[-1, 4\]; outputs logits float32\[-1, 3\], label int64\[-1\]$/m,
    );
    const config = JSON.parse(readFileSync(join(models, 'classifier', 'config.json'), 'utf8'));
    assert.deepEqual(config.versions, { '1': { format: 'export', file: 'classifier.pt2' } });
    assert.deepEqual(config.batching, { max_batch_size: 16, max_queue_delay_us: 1000 });
    await run(process.execPath, [...CLI, ...global, 'register', join(models, 'classifier')]);
    const [init, torch] = [await answer('classifier'), await answer('mlp')];
    const summaries = (r: typeof init) => r.outputs.map((o) => [o.name, o.summary]);
    assert.deepEqual(summaries(init), summaries(torch));

    cpSync(join(ensureTestModels(), 'adder', '1', 'model.pt'), join(loose, 'adder.pt'));
    const scripted = ['init', join(loose, 'adder.pt'), '--out', models];
    await assert.rejects(run(process.execPath, [...CLI, ...global, ...scripted]), (err: { stderr: string }) => {
      assert.match(
        err.stderr,
        /INVALID_CONFIG: .*adder\.pt is torchscript, which does not declare its inputs: give each with --input/,
      );
      return true;
    });
    await assert.rejects(
      run(process.execPath, [...CLI, ...global, ...scripted, '-i', 'a=float33[-1]']),
      /BAD_PARAMETER: --input a=float33\[-1\]/,
    );
    await run(process.execPath, [...CLI, ...global, ...scripted, '-i', 'a=float32[-1,-1]', '-i', 'b=float32[-1,-1]']);
    const adder = JSON.parse(readFileSync(join(models, 'adder', 'config.json'), 'utf8'));
    assert.deepEqual(adder.outputs, [{ name: 'output', dtype: 'float32', shape: [-1, -1] }]);
    assert.deepEqual(adder.versions, { '1': { format: 'torchscript', file: 'adder.pt' } });
  });

  it('register writes the config.json of a folder that holds only a .pt2 program', async () => {
    const bare = join(work, 'bare');
    mkdirSync(join(bare, '3'), { recursive: true });
    cpSync(join(ensureTestModels(), 'mlp', '1', 'model.pt2'), join(bare, '3', 'model.pt2'));
    const { stdout } = await run(process.execPath, [...CLI, ...global, 'register', bare]);
    assert.match(stdout, /^wrote .*bare\/config\.json \(export\)/m);
    assert.match(stdout, /^bare@3: ready \(/m);
    const empty = join(work, 'empty');
    mkdirSync(join(empty, '1'), { recursive: true });
    await assert.rejects(
      run(process.execPath, [...CLI, ...global, 'register', empty]),
      /INVALID_CONFIG: .*has no config\.json, and no single \.pt2 or \.onnx file/,
    );
  });

  it('register --export onnx: the export becomes the onnx variant of the same model and serves fp32', async () => {
    const dir = join(work, 'variant', 'mlp');
    cpSync(join(ensureTestModels(), 'mlp'), dir, { recursive: true });
    const own = [
      '--registry',
      join(work, 'variant.db'),
      '--models',
      join(work, 'none'),
      '--audit-log',
      join(work, 'a.jsonl'),
    ];
    const answerWith = async (...extra: string[]) => {
      const out = await run(process.execPath, [...CLI, ...own, 'infer', 'mlp', '-i', `x=${x}`, '--json', ...extra]);
      const result = JSON.parse(out.stdout) as {
        variant: string;
        outputs: { name: string; summary: { values: number[][] } }[];
      };
      return {
        variant: result.variant,
        logits: result.outputs.find((o) => o.name === 'logits')?.summary.values.flat() ?? [],
      };
    };

    // Registered first without an export: torch serves fp32.
    await run(process.execPath, [...CLI, ...own, 'register', dir]);
    const before = await answerWith();
    assert.equal(before.variant, 'torch-fp32');

    // An export past its tolerance changes nothing: the folder, the registry and the serving variant stay.
    const configBefore = readFileSync(join(dir, 'config.json'), 'utf8');
    await assert.rejects(
      run(process.execPath, [...CLI, ...own, 'register', dir, '--export', 'onnx', '--tolerance', '1e-12']),
      (err: { stderr: string }) => {
        assert.match(
          err.stderr,
          /^tensorgate: EXPORT_MISMATCH: mlp@1 exported to ONNX answers differently from PyTorch: output "logits" is off from PyTorch by up to \S+, \S+ of its spread \(tolerance 1e-12\)/m,
        );
        return true;
      },
    );
    assert.equal(readFileSync(join(dir, 'config.json'), 'utf8'), configBefore);
    assert.equal(existsSync(join(dir, '1', 'model.onnx')), false);
    assert.equal((await answerWith()).variant, 'torch-fp32');

    const { stdout } = await run(process.execPath, [...CLI, ...own, 'register', dir, '--export', 'onnx']);
    assert.match(stdout, /^mlp@1: exported to ONNX \(opset \d+\) as model\.onnx$/m);
    assert.match(stdout, /^mlp@1: ready \(/m);
    assert.match(
      stdout,
      /^ {2}fp32 → onnx-fp32: the ONNX export agrees with PyTorch \(error \S+ of its spread, tolerance 0\.0001\)/m,
    );
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
    assert.deepEqual(config.versions['1'], { format: 'export', file: 'model.pt2', onnx: 'model.onnx' });

    const onnx = await answerWith();
    assert.equal(onnx.variant, 'onnx-fp32');
    const torch = await answerWith('--engine', 'torch');
    assert.equal(torch.variant, 'torch-fp32');
    assert.equal(onnx.logits.length, 6);
    onnx.logits.forEach((v, i) => {
      assert.ok(Math.abs(v - (torch.logits[i] as number)) < 1e-5, `logits[${i}]: ${v} vs ${torch.logits[i]}`);
      assert.ok(Math.abs(v - (before.logits[i] as number)) < 1e-5, `logits[${i}] as before the export`);
    });
  });
});
