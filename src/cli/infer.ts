import { readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { type GlobalOptions, openGateway } from './common.js';

export interface InferOptions {
  version?: string;
  input: string[];
  precision?: string;
  engine?: string;
  json?: boolean;
}

/** `name=value` where value is JSON, @file.json, a tensor file path, or a tensor:// handle. */
export function parseInputArg(arg: string): [string, unknown] {
  const eq = arg.indexOf('=');
  if (eq <= 0) throw new Error(`--input "${arg}" must look like name=value`);
  const name = arg.slice(0, eq);
  const value = arg.slice(eq + 1);
  if (value.startsWith('@')) return [name, JSON.parse(readFileSync(value.slice(1), 'utf8'))];
  if (/^[[{\d-]/.test(value)) return [name, JSON.parse(value)];
  if (value.startsWith('tensor://')) return [name, value];
  return [name, { path: isAbsolute(value) ? value : resolve(value) }];
}

export async function runInfer(global: GlobalOptions, model: string, opts: InferOptions): Promise<void> {
  const gateway = await openGateway(global);
  try {
    // Only the requested version is loaded, with its variants checked, so that the request runs
    // on the variant a server would choose for it.
    await gateway.loadModel(model, opts.version);
    const result = await gateway.infer({
      model,
      version: opts.version,
      inputs: Object.fromEntries(opts.input.map(parseInputArg)),
      parameters: {
        ...(opts.precision ? { precision: opts.precision } : {}),
        ...(opts.engine ? { engine: opts.engine } : {}),
      },
    });
    if (opts.json) {
      process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      return;
    }
    for (const o of result.outputs) process.stdout.write(`${o.text}\n`);
    process.stdout.write(`variant: ${result.variant}\n`);
    const t = result.timings;
    process.stdout.write(
      `timings ms: total ${t.total_ms} (decode ${t.decode_ms}, queue ${t.queue_ms}, transfer ${t.transfer_ms}, compute ${t.compute_ms}, encode ${t.encode_ms})\n`,
    );
    for (const note of result.notes) process.stdout.write(`note: ${note}\n`);
  } finally {
    await gateway.close();
  }
}
