import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { joinPythonPath, PYTHON_PACKAGE_DIR, pythonExecutable } from '../engines/torch/worker-process.js';
import { type ErrorCode, isErrorCode, tgError } from '../errors.js';
import { defaultVersion } from '../registry/model-config.js';
import { readModelDir, versionDir, versionFile } from '../registry/repository.js';
import { dtypeSize } from '../tensor/dtype.js';
import { numberReader, typedView } from '../tensor/tensor.js';
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

export interface OutputError {
  name: string;
  maxAbs: number;
  maxRel: number;
  within: boolean;
}

export async function runExportOnnx(global: GlobalOptions, dir: string, opts: ExportOptions): Promise<void> {
  const source = readModelDir(dir);
  const { config } = source;
  const version = opts.version ?? defaultVersion(config);
  const v = config.versions[version];
  if (!v) throw tgError('VERSION_NOT_FOUND', `model "${config.name}" has no version "${version}"`);
  if (config.engine !== 'torch' || v.format === 'remote' || v.format === 'onnx')
    throw tgError('INVALID_CONFIG', `${config.name}@${version} is not a PyTorch model; only torch versions export`);
  const bf16 = [...config.inputs, ...config.outputs].find((s) => s.dtype === 'bfloat16');
  if (bf16) throw tgError('INVALID_CONFIG', `tensor "${bf16.name}" is bfloat16, which ONNX Runtime for Node has not`);
  const name = `${config.name}-onnx`;
  const out = resolve(opts.out ?? join(dirname(source.dir), name));
  if (existsSync(out)) throw tgError('INVALID_CONFIG', `${out} exists already; remove it or give another --out`);
  const work = mkdtempSync(join(tmpdir(), 'tensorgate-export-'));
  try {
    mkdirSync(join(out, '1'), { recursive: true });
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
      out: join(out, '1', 'model.onnx'),
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
      job.out,
      config.inputs.map((s) => ({ name: s.name, tensor: read(s) })),
      config.outputs.map((s) => ({ name: s.name, tensor: read(s) })),
      opts.tolerance,
    );
    const worst = errors.find((e) => !e.within);
    if (worst)
      throw tgError(
        'EXPORT_MISMATCH',
        `${config.name}@${version} exported to ONNX answers differently from PyTorch: output "${worst.name}" is off by up to ${worst.maxAbs.toExponential(2)} (relative ${worst.maxRel.toExponential(2)}), past the tolerance ${opts.tolerance}`,
        { model: config.name, version, output: worst.name, max_abs: worst.maxAbs, max_rel: worst.maxRel },
      );
    const raw = JSON.parse(readFileSync(join(source.dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    const { default_version: _default, parameters: _parameters, versions: _versions, ...kept } = raw;
    writeFileSync(
      join(out, 'config.json'),
      `${JSON.stringify(
        {
          ...kept,
          name,
          description: `${config.description} (ONNX export of ${config.name}@${version})`.trim(),
          engine: 'onnx',
          versions: { '1': { format: 'onnx', file: 'model.onnx' } },
        },
        null,
        2,
      )}\n`,
    );
    process.stdout.write(`exported ${config.name}@${version} to ${out} (ONNX opset ${result.opset})\n`);
    for (const e of errors)
      process.stdout.write(
        `  ${e.name}: max |onnx - torch| ${e.maxAbs.toExponential(2)}, max relative ${e.maxRel.toExponential(2)} (tolerance ${opts.tolerance})\n`,
      );
  } catch (err) {
    rmSync(out, { recursive: true, force: true });
    throw err;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  if (opts.register) await runRegister(global, out);
  else process.stdout.write(`register it with: tensorgate register ${out}\n`);
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

/** How far `actual` is from `expected`, element by element: within when |a - e| <= tol * (1 + |e|). */
export function outputError(
  name: string,
  actual: Named['tensor'],
  expected: Named['tensor'],
  tolerance: number,
): OutputError {
  const elements = expected.data.byteLength / dtypeSize(expected.dtype);
  if (actual.data.byteLength !== expected.data.byteLength || actual.shape.join() !== expected.shape.join())
    return { name, maxAbs: Number.POSITIVE_INFINITY, maxRel: Number.POSITIVE_INFINITY, within: false };
  const a = numberReader(actual);
  const e = numberReader(expected);
  let maxAbs = 0;
  let maxRel = 0;
  let within = true;
  for (let i = 0; i < elements; i++) {
    const diff = Math.abs(a(i) - e(i));
    const scale = Math.abs(e(i));
    maxAbs = Math.max(maxAbs, diff);
    maxRel = Math.max(maxRel, scale > 0 ? diff / scale : diff);
    if (!(diff <= tolerance * (1 + scale))) within = false;
  }
  return { name, maxAbs, maxRel, within };
}
