import { copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadRequestModel } from '../engines/torch/protocol.js';
import { tgError } from '../errors.js';
import { configText } from '../registry/model-config.js';
import { readModelDir, versionFile } from '../registry/repository.js';
import { isSealed } from '../security/model-encryption.js';
import {
  checkLine,
  checkOutput,
  describeCheck,
  type OutputCheck,
  type OutputKind,
  worstCheck,
} from '../tensor/compare.js';
import type { dtypeSize } from '../tensor/dtype.js';
import { typedView } from '../tensor/tensor.js';
import { type JobResult, runPythonJob } from './python-job.js';

/**
 * ONNX exports of PyTorch versions, for `tensorgate export --format onnx` and `register --export
 * onnx`, checked before anything is kept. The Python side (python/tensorgate/export_onnx.py)
 * loads the model as a worker does and runs torch.onnx.export; this side runs the exported graph
 * in ONNX Runtime on the inputs PyTorch answered and judges each output by the rule for its kind
 * (src/tensor/compare.ts). Past the tolerance, or when the export fails, nothing is written and
 * the error names the model, the output and the reason.
 */

interface ExportResult extends JobResult {
  opset?: number;
  tensors?: { name: string; shape: number[] }[];
}

/**
 * `tensorgate register --export onnx`: every PyTorch version of the folder exported to
 * `model.onnx` in its own version folder and named in config.json (`versions.N.onnx`), so that the
 * registered model gets an onnx variant. Each export is checked like `export-onnx`'s; when one
 * fails, nothing is changed and the error names the model, the version and the reason.
 */
export async function exportOnnxVariants(dir: string, tolerance: number): Promise<void> {
  const source = readModelDir(dir);
  const { config } = source;
  const versions = Object.entries(config.versions).flatMap(([version, v]) =>
    v.format !== 'remote' && v.format !== 'onnx' ? [{ version, v }] : [],
  );
  if (config.engine !== 'torch' || versions.length === 0)
    throw tgError(
      'INVALID_CONFIG',
      `${config.name} is not a PyTorch model (engine "${config.engine}"); only torch versions export`,
    );
  const work = mkdtempSync(join(tmpdir(), 'tensorgate-variants-'));
  try {
    const written: { version: string; file: string }[] = [];
    for (const { version, v } of versions) {
      if (isSealed(readFileSync(versionFile(source.dir, version, v.file))))
        throw tgError(
          'EXPORT_FAILED',
          `${config.name}@${version}: ${v.file} is encrypted, and its ONNX export would be written in the clear (the onnx engine reads plain files); export the plaintext model, or serve this one on torch`,
          { model: config.name, version },
        );
      const file = v.onnx ?? 'model.onnx';
      const exported = await exportOnnxVersion(source, version, join(work, `${version}.onnx`), tolerance);
      process.stdout.write(`${config.name}@${version}: exported to ONNX (opset ${exported.opset}) as ${file}\n`);
      for (const e of exported.errors) process.stdout.write(`  ${checkLine(e, 'onnx')}\n`);
      written.push({ version, file });
    }
    // Every export checked out: only now is the folder changed.
    const configPath = join(source.dir, 'config.json');
    const raw = JSON.parse(readFileSync(configPath, 'utf8')) as { versions: Record<string, Record<string, unknown>> };
    for (const { version, file } of written) {
      copyFileSync(join(work, `${version}.onnx`), versionFile(source.dir, version, file));
      (raw.versions[version] as Record<string, unknown>).onnx = file;
    }
    writeFileSync(`${configPath}.tmp`, configText(raw));
    renameSync(`${configPath}.tmp`, configPath);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

export interface Exported {
  opset: number | undefined;
  errors: OutputCheck[];
}

/**
 * One version exported to `outFile` and checked: Python (python/tensorgate/export_onnx.py) loads
 * the model as a worker does and runs torch.onnx.export; ONNX Runtime then runs the graph on the
 * inputs PyTorch answered. Throws EXPORT_FAILED or EXPORT_MISMATCH, naming model, version, output.
 */
export async function exportOnnxVersion(
  source: ReturnType<typeof readModelDir>,
  version: string,
  outFile: string,
  tolerance: number,
): Promise<Exported> {
  const { config } = source;
  const v = config.versions[version];
  if (!v) throw tgError('VERSION_NOT_FOUND', `model "${config.name}" has no version "${version}"`);
  if (config.engine !== 'torch' || v.format === 'remote' || v.format === 'onnx')
    throw tgError('INVALID_CONFIG', `${config.name}@${version} is not a PyTorch model; only torch versions export`);
  const bf16 = [...config.inputs, ...config.outputs].find((s) => s.dtype === 'bfloat16');
  if (bf16) throw tgError('INVALID_CONFIG', `tensor "${bf16.name}" is bfloat16, which ONNX Runtime for Node has not`);
  const { result, work, cleanup } = await runPythonJob<ExportResult>(
    'export_onnx',
    (work: string) => ({
      model: { ...loadRequestModel(config, version, source.dir), warmup_runs: 0 },
      out: outFile,
      check: work,
    }),
    `${config.name}@${version} cannot be exported to ONNX`,
    'EXPORT_FAILED',
  );
  try {
    const shapes = new Map((result.tensors ?? []).map((t) => [t.name, t.shape]));
    const read = (spec: (typeof config.inputs)[number]) => {
      const data = new Uint8Array(readFileSync(join(work, `${spec.name}.bin`)));
      return { dtype: spec.dtype, shape: shapes.get(spec.name) ?? [], data };
    };
    const errors = await compare(
      outFile,
      config.inputs.map((s) => ({ name: s.name, tensor: read(s) })),
      config.outputs.map((s) => ({ spec: s, tensor: read(s) })),
      tolerance,
    );
    const worst = worstCheck(errors);
    if (worst && !worst.within)
      throw tgError(
        'EXPORT_MISMATCH',
        `${config.name}@${version} exported to ONNX answers differently from PyTorch: ${describeCheck(worst, 'PyTorch')}`,
        { model: config.name, version, output: worst.output, error: worst.error, max_abs: worst.maxAbs },
      );
    return { opset: result.opset, errors };
  } catch (err) {
    rmSync(outFile, { force: true });
    throw err;
  } finally {
    cleanup();
  }
}

type Named = { name: string; tensor: { dtype: Parameters<typeof dtypeSize>[0]; shape: number[]; data: Uint8Array } };
type Expected = { spec: OutputKind; tensor: Named['tensor'] };

/** Runs the graph on `inputs` in ONNX Runtime (in this process: a CLI has no loop to keep free) and compares. */
async function compare(file: string, inputs: Named[], expected: Expected[], tolerance: number): Promise<OutputCheck[]> {
  const ort = await import('onnxruntime-node');
  const session = await ort.InferenceSession.create(file);
  try {
    const feeds: Record<string, InstanceType<typeof ort.Tensor>> = {};
    for (const { name, tensor } of inputs)
      feeds[name] = new ort.Tensor(tensor.dtype as 'float32', typedView(tensor) as Float32Array, tensor.shape);
    const results = await session.run(feeds);
    return expected.map(({ spec, tensor }) => {
      const got = results[spec.name];
      if (!got) throw tgError('EXPORT_FAILED', `the exported graph has no output "${spec.name}"`);
      const data = got.data as ArrayBufferView;
      const actual = {
        dtype: tensor.dtype,
        shape: [...got.dims],
        data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
      };
      return checkOutput(spec, actual, tensor, tolerance);
    });
  } finally {
    await session.release();
  }
}
