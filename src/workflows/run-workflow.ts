import { randomUUID } from 'node:crypto';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { tgError } from '../errors.js';
import type { Gateway, InferOptions } from '../gateway.js';
import {
  type DecodeContext,
  type DecodedInput,
  decodeInputs,
  type InputForm,
  preparedInputs,
} from '../requests/decode-inputs.js';
import { decodeProcessedInputs, type ProcessingOwner, preparedProcessedInputs } from '../requests/decode-processed.js';
import { TENSOR_INPUT_FORMS } from '../requests/inference-request.js';
import { timeoutMs, topK } from '../requests/parameters.js';
import { type OutputResult, presentOutput } from '../requests/present-output.js';
import { readSource, type TensorSource, tensorSource } from '../tensor/source.js';
import { isProcessedInput, type WorkflowPlan } from './definition.js';
import {
  type BranchRecord,
  executeWorkflow,
  type StageCaller,
  type StageRecord,
  type WorkflowRun,
} from './executor.js';

/** run_workflow's request: the same input forms as infer. */
export const WorkflowRequestSchema = z.object({
  workflow: z.string().describe('workflow name, from list_workflows'),
  inputs: z.record(z.string(), z.unknown()).describe(`Input tensors by declared name. ${TENSOR_INPUT_FORMS}`),
  parameters: z
    .record(z.string(), z.unknown())
    .optional()
    .describe('optional: {"timeout_ms": N} for the whole workflow, {"top_k": N} for output summaries'),
  request_id: z.string().max(128).optional().describe('echoed back in the result; generated when absent'),
});
export type WorkflowRequest = z.infer<typeof WorkflowRequestSchema>;

export type WorkflowOutput = OutputResult | { name: string; value: unknown; text: string };

export interface WorkflowResult {
  request_id: string;
  workflow: string;
  outputs: (WorkflowOutput & { from?: string })[];
  stages: StageRecord[];
  branches: BranchRecord[];
  timings: {
    decode_ms: number;
    /** From the first stage's start to the last one's end. */
    run_ms: number;
    encode_ms: number;
    total_ms: number;
  };
}

const KNOWN_PARAMETERS = ['timeout_ms', 'top_k'];

/** The caller must be allowed the workflow, every workflow it calls and every model it runs. */
export function checkWorkflowAccess(gateway: Gateway, caller: AuthInfo | undefined, name: string): void {
  gateway.access.check(caller, 'execute', 'workflow', name);
  const plan = gateway.workflows.plan(name);
  for (const w of plan.workflows) gateway.access.check(caller, 'execute', 'workflow', w);
  for (const m of plan.models) gateway.access.check(caller, 'execute', 'model', m);
}

export interface WorkflowExecution {
  plan: WorkflowPlan;
  request_id: string;
  run: WorkflowRun;
  top_k: number;
  /** performance.now() at the start, and the decode time. */
  start: number;
  decode_ms: number;
}

/**
 * The part every adapter shares: parameters checked, inputs checked against the workflow's specs
 * and read once (every stage that takes an input gets the same bytes), the graph run.
 */
export async function executeWorkflowRequest(
  gateway: Gateway,
  request: {
    workflow: string;
    request_id?: string | undefined;
    parameters?: Record<string, unknown> | undefined;
    /** Decodes the inputs against the workflow's declared inputs. */
    decode: (plan: WorkflowPlan) => DecodedInput[];
  },
  options: InferOptions = {},
): Promise<WorkflowExecution> {
  const start = performance.now();
  const plan = gateway.workflows.plan(request.workflow);
  const params = request.parameters ?? {};
  for (const key of Object.keys(params))
    if (!KNOWN_PARAMETERS.includes(key))
      throw tgError('BAD_PARAMETER', `unknown parameter "${key}"; a workflow takes ${KNOWN_PARAMETERS.join(', ')}`, {
        parameter: key,
      });
  const k = topK(params.top_k);
  const timeout = timeoutMs(params.timeout_ms) ?? plan.definition.timeout_ms ?? gateway.config.defaultTimeoutMs;
  const requestId = request.request_id ?? randomUUID();
  const inputs = new Map(request.decode(plan).map((d) => [d.name, readSource(d.tensor)]));
  const decodeMs = performance.now() - start;
  const run = await executeWorkflow(plan, inputs, stageCaller(gateway, options), {
    timeoutMs: timeout,
    signal: options.signal,
    requestId,
  });
  return { plan, request_id: requestId, run, top_k: k, start, decode_ms: round(decodeMs) };
}

/**
 * run_workflow: the inputs in any form infer takes, tensor outputs presented like infer's (a
 * tensor:// handle and a summary each), literal outputs as they are.
 */
export async function runWorkflow(
  gateway: Gateway,
  request: WorkflowRequest,
  options: InferOptions = {},
): Promise<WorkflowResult> {
  const { plan, request_id, run, top_k, start, decode_ms } = await executeWorkflowRequest(
    gateway,
    { ...request, decode: (plan) => decodeWorkflowInputs(plan, request.inputs, gateway) },
    options,
  );
  const encodeStart = performance.now();
  const outputs = run.outputs.map((o) => {
    if (!('tensor' in o)) return { name: o.name, value: o.value, text: `${o.name}: ${JSON.stringify(o.value)}` };
    return {
      ...presentOutput(gateway.store, o.name, o.tensor, `workflow:${plan.definition.name}:${o.name}`, {
        labels: labelsOf(gateway, plan, o.from),
        topK: top_k,
      }),
      from: o.from,
    };
  });
  const end = performance.now();
  return {
    request_id,
    workflow: plan.definition.name,
    outputs,
    stages: run.stages,
    branches: run.branches,
    timings: { decode_ms, run_ms: run.run_ms, encode_ms: round(end - encodeStart), total_ms: round(end - start) },
  };
}

/**
 * A workflow's inputs as an agent passes them (infer's forms): tensors checked against their
 * specs, files and texts read into BYTES items checked as the model input they feed checks them.
 */
export function decodeWorkflowInputs(
  plan: WorkflowPlan,
  inputs: Record<string, unknown>,
  ctx: DecodeContext,
): DecodedInput[] {
  const [files, tensors] = splitInputs(plan, inputs);
  return [
    ...decodeInputs(plan.inputs, Object.fromEntries(tensors), ctx),
    ...(Object.keys(plan.processed).length
      ? decodeProcessedInputs(filesOwner(plan), Object.fromEntries(files), ctx)
      : []),
  ];
}

/** The same for inputs an adapter decoded (OIP v2): files and texts as BYTES tensors. */
export function preparedWorkflowInputs(
  plan: WorkflowPlan,
  inputs: Map<string, TensorSource>,
  form: InputForm,
  ctx: DecodeContext,
): DecodedInput[] {
  const [files, tensors] = splitInputs(plan, Object.fromEntries(inputs));
  return [
    ...preparedInputs(plan.inputs, new Map(tensors), form),
    ...(Object.keys(plan.processed).length ? preparedProcessedInputs(filesOwner(plan), new Map(files), form, ctx) : []),
  ];
}

/** [files and texts, tensors] by name; a name that is neither is refused naming every input. */
function splitInputs<T>(plan: WorkflowPlan, inputs: Record<string, T>): [[string, T][], [string, T][]] {
  const files: [string, T][] = [];
  const tensors: [string, T][] = [];
  for (const [name, value] of Object.entries(inputs)) {
    if (name in plan.processed) files.push([name, value]);
    else if (plan.inputs.some((s) => s.name === name)) tensors.push([name, value]);
    else
      throw tgError(
        'UNKNOWN_INPUT',
        `input "${name}" is not declared by workflow ${plan.definition.name}; it takes ${plan.definition.inputs
          .map((i) => `"${i.name}" (${isProcessedInput(i) ? i.type : `${i.dtype}[${i.shape.join(', ')}]`})`)
          .join(', ')}`,
        { input: name, expected: plan.definition.inputs.map((i) => i.name) },
      );
  }
  return [files, tensors];
}

function filesOwner(plan: WorkflowPlan): ProcessingOwner {
  return { name: `workflow ${plan.definition.name}`, processing: { inputs: plan.processed } };
}

/** Model stages go through the gateway's pipeline (queue, batching, metrics); nested workflows recurse. */
function stageCaller(gateway: Gateway, options: InferOptions): StageCaller {
  const caller: StageCaller = {
    async model(target, version, inputs, { signal, timeoutMs: remaining, requestId }) {
      // A model with processing gets the workflow's files and texts as the BYTES items they were
      // read into, checked again as that model's own (its formats, its limits).
      const files = gateway.modelConfig(target).processing !== undefined;
      const result = await gateway.inferTensors(
        {
          model: target,
          ...(version !== undefined ? { version } : {}),
          request_id: requestId,
          parameters: { timeout_ms: Math.max(1, Math.ceil(remaining)) },
          inputs: new Map(
            [...inputs].map(([name, t]) => [
              name,
              files ? { ...tensorSource(t), bytes: true as const } : tensorSource(t),
            ]),
          ),
          form: files ? 'binary' : 'handle',
        },
        { signal, ...(options.adapter ? { adapter: options.adapter } : {}) },
      );
      return {
        version: result.version,
        outputs: result.outputs,
        timings: result.timings,
        batch_size: result.batch_size,
      };
    },
    workflow(target, inputs, { signal, timeoutMs: remaining, requestId }): Promise<WorkflowRun> {
      return executeWorkflow(gateway.workflows.plan(target), inputs, caller, {
        timeoutMs: remaining,
        signal,
        requestId,
      });
    },
  };
  return caller;
}

/** Class labels of the model output a workflow output came from, for top-k summaries. */
function labelsOf(gateway: Gateway, plan: WorkflowPlan, from: string): string[] | undefined {
  const [stageName, tensor] = from.split('.');
  const stage = plan.stages.find((s) => s.name === stageName);
  if (stage?.kind !== 'model' || tensor === undefined) return undefined;
  return gateway.modelConfig(stage.target).outputs.find((o) => o.name === tensor)?.labels;
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}
