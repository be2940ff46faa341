import { basename, resolve } from 'node:path';
import { tgError } from '../errors.js';
import { Gateway } from '../gateway.js';
import { DEFAULT_TOLERANCE } from '../registry/model-config.js';
import { type GlobalOptions, openGateway, stderrLogger } from './common.js';
import { exportOnnxVariants } from './export-onnx.js';
import { watchLoading } from './load-progress.js';
import { Progress } from './progress.js';

export interface RegisterOptions {
  /** `onnx`: export each PyTorch version to ONNX first, as the model's onnx variant. */
  export?: string;
  /** Of the export's check: |onnx - torch| <= tolerance * (1 + |torch|). */
  tolerance?: number;
}

export async function runRegister(global: GlobalOptions, dir: string, opts: RegisterOptions = {}): Promise<void> {
  if (Gateway.isWorkflowDir(dir)) return registerWorkflow(global, dir);
  if (opts.export !== undefined) {
    if (opts.export !== 'onnx')
      throw tgError('BAD_PARAMETER', `--export ${opts.export}: the one export format is onnx`, { parameter: 'export' });
    // Checked and written before registering: a failed export leaves the folder and registry as they were.
    await exportOnnxVariants(dir, opts.tolerance ?? DEFAULT_TOLERANCE.fp32);
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
