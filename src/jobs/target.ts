import { tgError } from '../errors.js';
import type { ModelConfig } from '../registry/model-config.js';
import { type RowsFile, rowsFile } from './items.js';
import type { JobSpec } from './spec.js';
import { type OutputRows, outputRowsOf } from './tensor-files.js';

/**
 * What a job runs, resolved from its spec against what the server serves: a model with
 * processing (items are files or texts), a model that takes tensors (items are an array's rows),
 * or a workflow with a file or text input; which input the items go to, and how they are sent.
 */

/** What resolving needs of the gateway. */
export interface TargetHost {
  modelConfig(name: string): ModelConfig;
  /** A workflow's file and text inputs and the models it runs; WORKFLOW_NOT_FOUND when unknown. */
  workflowPlan(name: string): { processed: string[]; models: string[] };
  allowedRoots: string[];
}

/** What a job runs, resolved against what the server serves. */
export interface Target {
  kind: 'model' | 'workflow';
  name: string;
  /** The file or text input the items go to. */
  input: string;
  /** Items per request: a model's batch; one for a workflow, whose branches are decided per run. */
  batch: number;
  /** Requests kept in flight while nothing else calls the models. */
  lanes: number;
  /** The models it runs: it steps back while any of them has interactive calls. */
  models: string[];
  /** A model that takes tensors: the array (a .npy file, a .safetensors file's tensor) whose rows are the items. */
  rows?: RowsFile;
  /** With `tensors`: the outputs written as .npy files. */
  outputRows?: OutputRows[];
}

/** What `spec` runs, checked against the models and workflows `host` serves now. */
export function resolveTarget(spec: JobSpec, host: TargetHost): Target {
  if ((spec.model === undefined) === (spec.workflow === undefined))
    throw tgError('BAD_PARAMETER', 'a job runs a "model" or a "workflow": give one of the two', {
      parameter: 'model',
    });
  const byRows = 'rows' in spec.items;
  if (spec.model !== undefined) {
    const config = host.modelConfig(spec.model);
    const processed = Object.keys(config.processing?.inputs ?? {});
    const what = `model "${config.name}"`;
    const common = {
      kind: 'model' as const,
      name: spec.model,
      batch: spec.batch ?? config.batching?.max_batch_size ?? 8,
      lanes: Math.max(2, (config.resources?.instances ?? 1) + 1),
      models: [spec.model],
      ...(spec.tensors ? { outputRows: outputRowsOf(what, config.outputs) } : {}),
    };
    if (processed.length > 0) {
      if (byRows)
        throw tgError('BAD_PARAMETER', `${what} takes files or texts: give them as a folder, files, lines or a table`, {
          parameter: 'items',
        });
      return { ...common, input: pickInput(what, processed, spec.input) };
    }
    if (!byRows)
      throw tgError(
        'BAD_PARAMETER',
        `${what} takes tensors, not files or texts: give its inputs' rows as {"rows": "/data/x.npy"}`,
        { parameter: 'items' },
      );
    const input = pickInput(
      what,
      config.inputs.map((i) => i.name),
      spec.input,
    );
    const { rows: path, tensor } = spec.items as { rows: string; tensor?: string };
    const rows = rowsFile(path, host.allowedRoots, tensor);
    checkRows(what, config.inputs.find((i) => i.name === input) as ModelConfig['inputs'][number], rows);
    return { ...common, input, rows };
  }
  if (byRows) throw tgError('BAD_PARAMETER', 'a workflow job takes files or texts, not rows', { parameter: 'items' });
  if (spec.tensors)
    throw tgError(
      'BAD_PARAMETER',
      'tensors: a workflow job writes its outputs in the results lines; "tensors" is for a model job',
      { parameter: 'tensors' },
    );
  const name = spec.workflow as string;
  if (spec.version !== undefined)
    throw tgError('BAD_PARAMETER', `"version" picks a model's version; workflow ${name} names its own`, {
      parameter: 'version',
    });
  const plan = host.workflowPlan(name);
  if (plan.processed.length === 0)
    throw tgError(
      'BAD_PARAMETER',
      `workflow "${name}" takes tensors, not files or texts: a job runs a workflow with an image, text or audio input`,
      { parameter: 'workflow' },
    );
  return {
    kind: 'workflow',
    name,
    input: pickInput(`workflow "${name}"`, plan.processed, spec.input),
    batch: 1,
    lanes: spec.batch ?? 8,
    models: plan.models,
  };
}

/** The file or text input a job's items go to: `wanted`, or the only one there is. */
function pickInput(what: string, inputs: string[], wanted: string | undefined): string {
  if (wanted !== undefined && !inputs.includes(wanted))
    throw tgError('UNKNOWN_INPUT', `${what} has no input "${wanted}"; it takes ${inputs.join(', ')}`, {
      input: wanted,
    });
  if (wanted === undefined && inputs.length > 1)
    throw tgError('BAD_PARAMETER', `${what} takes ${inputs.join(', ')}: name the one the items go to in "input"`, {
      parameter: 'input',
    });
  return wanted ?? (inputs[0] as string);
}

/** The rows' dtype and row shape against the input's spec, before anything runs. */
function checkRows(what: string, spec: ModelConfig['inputs'][number], rows: RowsFile): void {
  const { dtype, shape } = rows.layout;
  if (dtype !== spec.dtype)
    throw tgError(
      'DTYPE_MISMATCH',
      `${rows.label} holds ${dtype}; ${what}'s input "${spec.name}" takes ${spec.dtype}`,
      {
        input: spec.name,
      },
    );
  const row = shape.slice(1);
  const want = spec.shape.slice(1);
  if (row.length !== want.length || row.some((d, i) => want[i] !== -1 && want[i] !== d))
    throw tgError(
      'SHAPE_MISMATCH',
      `${rows.label} holds rows of shape [${row.join(', ')}]; ${what}'s input "${spec.name}" takes [${spec.shape.join(', ')}] (the first dimension is the rows)`,
      { input: spec.name },
    );
}
