import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { tgError } from '../errors.js';
import { Gateway } from '../gateway.js';
import { configText, DEFAULT_TOLERANCE } from '../registry/model-config.js';
import { type GlobalOptions, openGateway, stderrLogger } from './common.js';
import { exportOnnxVariants } from './export-onnx.js';
import { declaringModelFile, runInit } from './init.js';
import { watchLoading } from './load-progress.js';
import { Progress } from './progress.js';

export interface RegisterOptions {
  /**
   * `onnx`: export each PyTorch version to ONNX first, as the model's onnx variant; `aoti`: compile
   * each version with AOTInductor as its fp32 variant (optimization.torch "aoti").
   */
  export?: string;
  /** Of the ONNX export's check: the largest error allowed, scaled to each output. */
  tolerance?: number;
}

export async function runRegister(global: GlobalOptions, dir: string, opts: RegisterOptions = {}): Promise<void> {
  if (Gateway.isWorkflowDir(dir)) return registerWorkflow(global, dir);
  if (existsSync(dir) && !existsSync(join(dir, 'config.json'))) {
    // As Triton's auto-complete: a folder holding one self-describing model file needs no config.
    const file = declaringModelFile(dir);
    if (!file)
      throw tgError(
        'INVALID_CONFIG',
        `${resolve(dir)} has no config.json, and no single .pt2 or .onnx file in one version folder to write one from: write one with tensorgate init FILE`,
        { dir: resolve(dir) },
      );
    await runInit(file);
  }
  if (opts.export === 'onnx') {
    // Checked and written before registering: a failed export leaves the folder and registry as they were.
    await exportOnnxVariants(dir, opts.tolerance ?? DEFAULT_TOLERANCE.fp32);
  } else if (opts.export === 'aoti') {
    setTorchOptimization(dir, 'aoti');
  } else if (opts.export !== undefined) {
    throw tgError('BAD_PARAMETER', `--export ${opts.export}: onnx or aoti (a variant of each version)`, {
      parameter: 'export',
    });
  }
  const progress = new Progress({ label: `registering ${basename(resolve(dir))}` });
  const gateway = await openGateway(global, {}, progress.wrap(stderrLogger));
  const unwatch = watchLoading(gateway, progress);
  try {
    const info = await gateway
      .register(dir, `cli:${process.env.USER ?? process.getuid?.() ?? 'unknown'}`)
      .finally(() => {
        unwatch();
        progress.stop();
      });
    for (const v of info.versions) {
      const detail = v.state === 'ready' ? `load ${v.load_ms} ms, warm-up ${v.warmup_ms} ms on ${v.device}` : v.error;
      process.stdout.write(`${info.name}@${v.version}: ${v.state} (${detail})\n`);
      for (const c of v.engine_choice ?? [])
        process.stdout.write(`  ${c.precision} → ${c.variant ?? 'none'}: ${c.why}\n`);
    }
    if (info.versions.some((v) => v.state !== 'ready')) process.exitCode = 1;
  } finally {
    await gateway.close();
  }
}

/** Sets optimization.torch in a model folder's config.json (written whole, then renamed). */
function setTorchOptimization(dir: string, how: string): void {
  const path = join(dir, 'config.json');
  const raw = JSON.parse(readFileSync(path, 'utf8')) as { optimization?: Record<string, unknown> };
  raw.optimization = { ...raw.optimization, torch: how };
  writeFileSync(`${path}.tmp`, configText(raw));
  renameSync(`${path}.tmp`, path);
}

/** A workflow folder: compiled against the registered models and workflows, then recorded. */
async function registerWorkflow(global: GlobalOptions, dir: string): Promise<void> {
  const gateway = await openGateway(global, {}, stderrLogger);
  try {
    const info = await gateway.registerWorkflow(dir, `cli:${process.env.USER ?? process.getuid?.() ?? 'unknown'}`);
    process.stdout.write(
      `workflow ${info.name}: ${info.state} (${info.stages.length} stages; models ${info.models.join(', ')})\n`,
    );
  } finally {
    await gateway.close();
  }
}
