import { execFile } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { joinPythonPath, PYTHON_PACKAGE_DIR, pythonExecutable } from '../engines/torch/worker-process.js';
import { type ErrorCode, isErrorCode, tgError } from '../errors.js';
import { defaultVersion } from '../registry/model-config.js';
import { readModelDir, versionDir, versionFile } from '../registry/repository.js';
import { isSealed } from '../security/model-encryption.js';
import { type OutputError, outputError } from '../tensor/compare.js';
import type { dtypeSize } from '../tensor/dtype.js';
import { typedView } from '../tensor/tensor.js';
import type { GlobalOptions } from './common.js';
import { runRegister } from './register.js';

/**
 * `tensorgate export-onnx DIR`: one version of a PyTorch model folder, exported to ONNX as a model
 * folder of its own for the onnx engine, and checked before anything is kept. The Python side
 * (python/tensorgate/export_onnx.py) loads the model as a worker does and runs torch.onnx.export;
 * this side runs the exported graph in ONNX Runtime on the inputs PyTorch answered and compares,
 * element by element, |onnx - torch| <= tolerance * (1 + |torch|). Past the tolerance, or when the
 * export fails, nothing is written and the error names the model, the output and the reason.
 */

export interface ExportOptions {
  version?: string;
  out?: string;
  tolerance: number;
  register?: boolean;
}

interface ExportResult {
  ok: boolean;
  code?: string;
  message?: string;
  opset?: number;
  tensors?: { name: string; shape: number[] }[];
}

export async function runExportOnnx(global: GlobalOptions, dir: string, opts: ExportOptions): Promise<void> {
  const source = readModelDir(dir);
  const { config } = source;
  const version = opts.version ?? defaultVersion(config);
  const name = `${config.name}-onnx`;
  const out = resolve(opts.out ?? join(dirname(source.dir), name));
  if (existsSync(out)) throw tgError('INVALID_CONFIG', `${out} exists already; remove it or give another --out`);
  try {
    mkdirSync(join(out, '1'), { recursive: true });
    const exported = await exportVersion(source, version, join(out, '1', 'model.onnx'), opts.tolerance);
    const raw = JSON.parse(readFileSync(join(source.dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    const { default_version: _default, parameters: _parameters, versions: _versions, optimization, ...kept } = raw;
    const onnxGraph = (optimization as { onnx_graph?: string } | undefined)?.onnx_graph;
    writeFileSync(
      join(out, 'config.json'),
      `${JSON.stringify(
        {
          ...kept,
          name,
          description: `${config.description} (ONNX export of ${config.name}@${version})`.trim(),
          engine: 'onnx',
          ...(onnxGraph ? { optimization: { onnx_graph: onnxGraph } } : {}),
          versions: { '1': { format: 'onnx', file: 'model.onnx' } },
        },
        null,
        2,
      )}\n`,
    );
    process.stdout.write(`exported ${config.name}@${version} to ${out} (ONNX opset ${exported.opset})\n`);
    printErrors(exported.errors, opts.tolerance);
  } catch (err) {
    rmSync(out, { recursive: true, force: true });
    throw err;
  }
  if (opts.register) await runRegister(global, out);
  else process.stdout.write(`register it with: tensorgate register ${out}\n`);
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
      const exported = await exportVersion(source, version, join(work, `${version}.onnx`), tolerance);
      process.stdout.write(`${config.name}@${version}: exported to ONNX (opset ${exported.opset}) as ${file}\n`);
      printErrors(exported.errors, tolerance);
      written.push({ version, file });
    }
    // Every export checked out: only now is the folder changed.
    const configPath = join(source.dir, 'config.json');
    const raw = JSON.parse(readFileSync(configPath, 'utf8')) as { versions: Record<string, Record<string, unknown>> };
    for (const { version, file } of written) {
      copyFileSync(join(work, `${version}.onnx`), versionFile(source.dir, version, file));
      (raw.versions[version] as Record<string, unknown>).onnx = file;
    }
    writeFileSync(`${configPath}.tmp`, `${JSON.stringify(raw, null, 2)}\n`);
    renameSync(`${configPath}.tmp`, configPath);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

interface Exported {
  opset: number | undefined;
  errors: OutputError[];
}

/**
 * One version exported to `outFile` and checked: Python (python/tensorgate/export_onnx.py) loads
 * the model as a worker does and runs torch.onnx.export; ONNX Runtime then runs the graph on the
 * inputs PyTorch answered. Throws EXPORT_FAILED or EXPORT_MISMATCH, naming model, version, output.
 */
async function exportVersion(
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
  const work = mkdtempSync(join(tmpdir(), 'tensorgate-export-'));
  try {
    const job = {
      model: {
        name: config.name,
        version,
        format: v.format,
        file: versionFile(source.dir, version, v.file),
        code_dir: versionDir(source.dir, version),
        ...(v.entry ? { entry: v.entry } : {}),
        threads: config.resources.threads,
        inputs: config.inputs.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
        outputs: config.outputs.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
        warmup_runs: 0,
      },
      out: outFile,
      check: work,
    };
    writeFileSync(join(work, 'job.json'), JSON.stringify(job));
    const { stdout } = await promisify(execFile)(
      pythonExecutable(),
      ['-m', 'tensorgate.export_onnx', join(work, 'job.json')],
      { env: { ...process.env, PYTHONPATH: joinPythonPath(PYTHON_PACKAGE_DIR) }, maxBuffer: 1 << 20 },
    );
    const result = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as ExportResult;
    if (!result.ok) {
      const code: ErrorCode = result.code && isErrorCode(result.code) ? result.code : 'EXPORT_FAILED';
      throw tgError(code, `${config.name}@${version} cannot be exported to ONNX: ${result.message}`, {
        model: config.name,
        version,
      });
    }
    const shapes = new Map((result.tensors ?? []).map((t) => [t.name, t.shape]));
    const read = (spec: (typeof config.inputs)[number]) => {
      const data = new Uint8Array(readFileSync(join(work, `${spec.name}.bin`)));
      return { dtype: spec.dtype, shape: shapes.get(spec.name) ?? [], data };
    };
    const errors = await compare(
      outFile,
      config.inputs.map((s) => ({ name: s.name, tensor: read(s) })),
      config.outputs.map((s) => ({ name: s.name, tensor: read(s) })),
      tolerance,
    );
    const worst = errors.find((e) => !e.within);
    if (worst)
      throw tgError(
        'EXPORT_MISMATCH',
        `${config.name}@${version} exported to ONNX answers differently from PyTorch: output "${worst.name}" is off by up to ${worst.maxAbs.toExponential(2)} (relative ${worst.maxRel.toExponential(2)}), past the tolerance ${tolerance}`,
        { model: config.name, version, output: worst.name, max_abs: worst.maxAbs, max_rel: worst.maxRel },
      );
    return { opset: result.opset, errors };
  } catch (err) {
    rmSync(outFile, { force: true });
    throw err;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

function printErrors(errors: OutputError[], tolerance: number): void {
  for (const e of errors)
    process.stdout.write(
      `  ${e.name}: max |onnx - torch| ${e.maxAbs.toExponential(2)}, max relative ${e.maxRel.toExponential(2)} (tolerance ${tolerance})\n`,
    );
}

type Named = { name: string; tensor: { dtype: Parameters<typeof dtypeSize>[0]; shape: number[]; data: Uint8Array } };

/** Runs the graph on `inputs` in ONNX Runtime (in this process: a CLI has no loop to keep free) and compares. */
async function compare(file: string, inputs: Named[], expected: Named[], tolerance: number): Promise<OutputError[]> {
  const ort = await import('onnxruntime-node');
  const session = await ort.InferenceSession.create(file);
  try {
    const feeds: Record<string, InstanceType<typeof ort.Tensor>> = {};
    for (const { name, tensor } of inputs)
      feeds[name] = new ort.Tensor(tensor.dtype as 'float32', typedView(tensor) as Float32Array, tensor.shape);
    const results = await session.run(feeds);
    return expected.map(({ name, tensor }) => {
      const got = results[name];
      if (!got) throw tgError('EXPORT_FAILED', `the exported graph has no output "${name}"`);
      const data = got.data as ArrayBufferView;
      const actual = {
        dtype: tensor.dtype,
        shape: [...got.dims],
        data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
      };
      return outputError(name, actual, tensor, tolerance);
    });
  } finally {
    await session.release();
  }
}
