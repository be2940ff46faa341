import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { ensureTestModels, PYTHON, ROOT } from '../helpers/models.js';

/**
 * `tensorgate export-onnx` with real parts: PyTorch exports (TorchScript with a dict of outputs),
 * ONNX Runtime checks the export against PyTorch's answers, the new folder registers and serves on
 * the onnx engine with the torch model's outputs; a model with an operator ONNX lacks fails with
 * the operator named and leaves nothing behind.
 */

const run = promisify(execFile);
const CLI = [join(ROOT, 'bin', 'tensorgate.js')];

describe('tensorgate export-onnx', { timeout: 180_000 }, () => {
  let work: string;
  let global: string[];

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'tg-export-'));
    cpSync(join(ensureTestModels(), 'mlp'), join(work, 'mlp'), { recursive: true });
    global = ['--registry', join(work, 'r.db'), '--models', join(work, 'none'), '--audit-log', join(work, 'a.jsonl')];
  });

  it('exports a TorchScript model, checks it against PyTorch, registers it, and it answers as PyTorch does', async () => {
    const { stdout } = await run(process.execPath, [...CLI, ...global, 'export-onnx', join(work, 'mlp'), '--register']);
    assert.match(stdout, /^exported mlp@1 to .*mlp-onnx \(ONNX opset 14\)$/m);
    assert.match(stdout, /^ {2}logits: max \|onnx - torch\| \S+, max relative \S+ \(tolerance 0\.0001\)$/m);
    assert.match(stdout, /^mlp-onnx@1: ready \(/m);
    const config = JSON.parse(readFileSync(join(work, 'mlp-onnx', 'config.json'), 'utf8'));
    assert.equal(config.engine, 'onnx');
    assert.deepEqual(config.versions, { '1': { format: 'onnx', file: 'model.onnx' } });

    await run(process.execPath, [...CLI, ...global, 'register', join(work, 'mlp')]);
    const x = JSON.stringify([
      [0.5, -1, 2, 0.25],
      [-3, 1.5, 0, 1],
    ]);
    const answer = async (model: string) => {
      const out = await run(process.execPath, [...CLI, ...global, 'infer', model, '-i', `x=${x}`, '--json']);
      return JSON.parse(out.stdout) as { outputs: { name: string; summary: { values: number[] | number[][] } }[] };
    };
    const [torch, onnx] = [await answer('mlp'), await answer('mlp-onnx')];
    const values = (r: typeof torch, name: string) => r.outputs.find((o) => o.name === name)?.summary.values;
    assert.deepEqual(values(onnx, 'label'), values(torch, 'label'));
    const t = (values(torch, 'logits') as number[][]).flat();
    const o = (values(onnx, 'logits') as number[][]).flat();
    t.forEach((v, i) => {
      assert.ok(Math.abs(v - (o[i] as number)) < 1e-5, `logits[${i}]: ${v} vs ${o[i]}`);
    });
  });

  it('an operator ONNX lacks: EXPORT_FAILED naming it, and nothing written', async () => {
    const dir = join(work, 'spectrum');
    mkdirSync(join(dir, '1'), { recursive: true });
    writeFileSync(
      join(dir, '1', 'model.py'),
      'import torch\n\n\nclass Spectrum(torch.nn.Module):\n    def forward(self, x):\n        return torch.fft.fft(x).abs()\n\n\ndef build():\n    return Spectrum()\n',
    );
    await run(PYTHON, ['-c', `import torch; torch.save({}, ${JSON.stringify(join(dir, '1', 'weights.pt'))})`]);
    writeFileSync(
      join(dir, 'config.json'),
      JSON.stringify({
        name: 'spectrum',
        inputs: [{ name: 'x', dtype: 'float32', shape: [-1, 8] }],
        outputs: [{ name: 'y', dtype: 'float32', shape: [-1, 8] }],
        versions: { '1': { format: 'eager', entry: 'model:build', file: 'weights.pt' } },
      }),
    );
    await assert.rejects(run(process.execPath, [...CLI, ...global, 'export-onnx', dir]), (err: { stderr: string }) => {
      assert.match(err.stderr, /^tensorgate: EXPORT_FAILED: spectrum@1 cannot be exported to ONNX: .*'aten::fft_fft'/m);
      return true;
    });
    assert.equal(existsSync(join(work, 'spectrum-onnx')), false);
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
    const x = JSON.stringify([
      [0.5, -1, 2, 0.25],
      [-3, 1.5, 0, 1],
    ]);
    const answer = async (...extra: string[]) => {
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
    const before = await answer();
    assert.equal(before.variant, 'torch-fp32');

    // An export past its tolerance changes nothing: the folder, the registry and the serving variant stay.
    const configBefore = readFileSync(join(dir, 'config.json'), 'utf8');
    await assert.rejects(
      run(process.execPath, [...CLI, ...own, 'register', dir, '--export', 'onnx', '--tolerance', '1e-12']),
      (err: { stderr: string }) => {
        assert.match(
          err.stderr,
          /^tensorgate: EXPORT_MISMATCH: mlp@1 exported to ONNX answers differently from PyTorch: output "logits" is off by up to \S+ .*past the tolerance 1e-12/m,
        );
        return true;
      },
    );
    assert.equal(readFileSync(join(dir, 'config.json'), 'utf8'), configBefore);
    assert.equal(existsSync(join(dir, '1', 'model.onnx')), false);
    assert.equal((await answer()).variant, 'torch-fp32');

    const { stdout } = await run(process.execPath, [...CLI, ...own, 'register', dir, '--export', 'onnx']);
    assert.match(stdout, /^mlp@1: exported to ONNX \(opset 14\) as model\.onnx$/m);
    assert.match(stdout, /^mlp@1: ready \(/m);
    assert.match(
      stdout,
      /^ {2}fp32 → onnx-fp32: the ONNX export agrees with PyTorch \(max abs error \S+, tolerance 0\.0001\)/m,
    );
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
    assert.deepEqual(config.versions['1'], { format: 'torchscript', file: 'model.pt', onnx: 'model.onnx' });

    const onnx = await answer();
    assert.equal(onnx.variant, 'onnx-fp32');
    const torch = await answer('--engine', 'torch');
    assert.equal(torch.variant, 'torch-fp32');
    assert.equal(onnx.logits.length, 6);
    onnx.logits.forEach((v, i) => {
      assert.ok(Math.abs(v - (torch.logits[i] as number)) < 1e-5, `logits[${i}]: ${v} vs ${torch.logits[i]}`);
      assert.ok(Math.abs(v - (before.logits[i] as number)) < 1e-5, `logits[${i}] as before the export`);
    });
  });
});
