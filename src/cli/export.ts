import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { loadRequestModel } from '../engines/torch/protocol.js';
import { tgError } from '../errors.js';
import { configText, defaultVersion } from '../registry/model-config.js';
import { readModelDir } from '../registry/repository.js';
import { checkLine, type OutputCheck } from '../tensor/compare.js';
import { exportOnnxVersion } from './export-onnx.js';
import { type JobResult, runPythonJob } from './python-job.js';

/**
 * `tensorgate export DIR --format onnx|export|aoti`: one version of a PyTorch model folder (eager,
 * TorchScript or an exported program) written as a model folder of its own, NAME-FORMAT beside DIR,
 * checked against the original before anything is kept:
 *
 * - `export`: a torch.export program (.pt2), every -1 of the config a dynamic dimension; the way
 *   off TorchScript, which torch 2.x deprecates;
 * - `aoti`: an AOTInductor package (.pt2) compiled for `--device`, served as it was compiled;
 * - `onnx`: an ONNX graph for the in-process onnx engine (export-onnx.ts).
 *
 * The new model is checked on seeded inputs of 3 rows against the original, each output by the
 * rule for its kind (src/tensor/compare.ts): past the tolerance (EXPORT_MISMATCH), or when the export
 * fails (EXPORT_FAILED), nothing is written and the error names the model, the output and why.
 */

export const EXPORT_FORMATS = ['export', 'aoti', 'onnx'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];

export interface ExportOptions {
  format: ExportFormat;
  version?: string;
  out?: string;
  /** aoti: the device the package is compiled for (default: the model's). */
  device?: string;
  tolerance: number;
}

interface TorchExportResult extends JobResult {
  format: string;
  device: string;
  torch: string;
  checks: {
    output: string;
    rule: OutputCheck['rule'];
    error: number | null;
    max_abs: number | null;
    changed: number;
    compared: number;
    tolerance: number;
    within: boolean;
  }[];
}

/** Writes the exported model folder and returns its path. */
export async function runExport(dir: string, opts: ExportOptions): Promise<string> {
  if (!EXPORT_FORMATS.includes(opts.format))
    throw tgError('BAD_PARAMETER', `--format ${opts.format}: one of ${EXPORT_FORMATS.join(', ')}`, {
      parameter: 'format',
    });
  const source = readModelDir(dir);
  const { config } = source;
  const version = opts.version ?? defaultVersion(config);
  if (!config.versions[version])
    throw tgError('VERSION_NOT_FOUND', `model "${config.name}" has no version "${version}"`);
  if (config.engine !== 'torch')
    throw tgError(
      'INVALID_CONFIG',
      `${config.name} is not a PyTorch model (engine "${config.engine}"); only torch versions export`,
    );
  const name = `${config.name}-${opts.format}`;
  const out = resolve(opts.out ?? join(dirname(source.dir), name));
  if (existsSync(out)) throw tgError('INVALID_CONFIG', `${out} exists already; remove it or give another --out`);
  const raw = JSON.parse(readFileSync(join(source.dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const { default_version: _default, versions: _versions, ...kept } = raw;
  const file = opts.format === 'onnx' ? 'model.onnx' : 'model.pt2';
  try {
    mkdirSync(join(out, '1'), { recursive: true });
    let checks: OutputCheck[];
    let derived: Record<string, unknown>;
    let what: string;
    if (opts.format === 'onnx') {
      const exported = await exportOnnxVersion(source, version, join(out, '1', file), opts.tolerance);
      checks = exported.errors;
      what = `ONNX opset ${exported.opset}`;
      const onnxGraph = (raw.optimization as { onnx_graph?: string } | undefined)?.onnx_graph;
      const { parameters: _p, optimization: _o, ...rest } = kept;
      derived = { ...rest, engine: 'onnx', ...(onnxGraph ? { optimization: { onnx_graph: onnxGraph } } : {}) };
    } else {
      const device = opts.device ?? config.resources.device;
      const { result, cleanup } = await runPythonJob<TorchExportResult>(
        'export',
        () => ({
          model: { ...loadRequestModel(config, version, source.dir), warmup_runs: 0 },
          format: opts.format,
          out: join(out, '1', file),
          device,
          tolerance: opts.tolerance,
        }),
        `${config.name}@${version} cannot be exported as ${opts.format === 'aoti' ? 'an AOTInductor package' : 'a torch.export program'}`,
        'EXPORT_FAILED',
      );
      cleanup();
      checks = result.checks.map((c) => ({
        output: c.output,
        rule: c.rule,
        error: c.error ?? Number.POSITIVE_INFINITY,
        maxAbs: c.max_abs ?? Number.POSITIVE_INFINITY,
        changed: c.changed,
        compared: c.compared,
        tolerance: c.tolerance,
        within: c.within,
      }));
      what = `torch ${result.torch}, ${result.device}`;
      derived = opts.format === 'aoti' ? aotiConfig(kept, result.device) : exportConfig(kept);
    }
    const description = `${config.description} (${opts.format} of ${config.name}@${version})`.trim();
    const versions = { '1': { format: opts.format, file } };
    writeFileSync(join(out, 'config.json'), configText({ ...derived, name, description, versions }));
    process.stdout.write(`exported ${config.name}@${version} to ${out} (${what})\n`);
    for (const c of checks) process.stdout.write(`  ${checkLine(c, opts.format)}\n`);
  } catch (err) {
    rmSync(out, { recursive: true, force: true });
    throw err;
  }
  return out;
}

/** A program takes what the original took; TorchScript-only optimizations do not apply to it. */
function exportConfig(kept: Record<string, unknown>): Record<string, unknown> {
  const optimization = kept.optimization as { torch?: string } | undefined;
  if (optimization?.torch === 'freeze' || optimization?.torch === 'optimize_for_inference') {
    const { torch: _torch, ...rest } = optimization;
    return { ...kept, optimization: rest };
  }
  return kept;
}

/** A package runs as it was compiled: fp32 only, on the device it was compiled for. */
function aotiConfig(kept: Record<string, unknown>, device: string): Record<string, unknown> {
  const { parameters: _p, optimization: _o, ...rest } = kept;
  const resources = (kept.resources as Record<string, unknown> | undefined) ?? {};
  return { ...rest, parameters: { precision: ['fp32'] }, resources: { ...resources, device } };
}
