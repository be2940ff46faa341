import type { AuthInfo } from '@modelcontextprotocol/server';
import { tgError } from '../errors.js';
import type { Gateway, InferOptions, TensorInferenceResult } from '../gateway.js';
import { defaultVersion, type TensorSpec } from '../registry/model-config.js';
import type { InputForm } from '../requests/decode-inputs.js';
import type { TensorSource } from '../tensor/source.js';
import { VERSION } from '../version.js';
import { isProcessedInput } from '../workflows/definition.js';
import { executeWorkflowRequest, preparedWorkflowInputs } from '../workflows/run-workflow.js';
import { oipDatatype } from './datatypes.js';

/**
 * What the OIP v2 REST routes and the gRPC service both answer, in the protocol's terms: one
 * implementation, two encodings.
 */

export const OIP_EXTENSIONS = ['binary_tensor_data', 'system_shared_memory', 'model_repository', 'statistics'];

export function serverMetadata() {
  return { name: 'tensorgate', version: VERSION, extensions: OIP_EXTENSIONS };
}

/** Ready once start-up has loaded the repository, until the server stops (Gateway.starting says why). */
export function serverReady(gateway: Gateway): boolean {
  return !gateway.closing && !gateway.starting;
}

export function checkVersion<T extends { version: string }>(versions: T[], model: string, version: string): T {
  const found = versions.find((v) => v.version === version);
  if (!found)
    throw tgError(
      'VERSION_NOT_FOUND',
      `${model} has no version ${version}; it has ${versions.map((v) => v.version).join(', ')}`,
      { model, version },
    );
  return found;
}

const tensorMetadata = (s: TensorSpec) => ({ name: s.name, datatype: oipDatatype(s.dtype), shape: s.shape });

export function modelMetadata(gateway: Gateway, model: string, version?: string) {
  const config = gateway.modelConfig(model);
  const info = gateway.modelInfo(config.name);
  if (version) checkVersion(info.versions, config.name, version);
  const format = config.versions[version || defaultVersion(config)]?.format;
  return {
    name: config.name,
    versions: version ? [version] : info.versions.map((v) => v.version),
    // Triton's platform names: what a client of Triton expects for each kind of model.
    platform: format === 'torchscript' ? 'pytorch_libtorch' : format === 'onnx' ? 'onnxruntime_onnx' : 'pytorch',
    // A model with processing takes its files as BYTES, one element per image.
    inputs: config.processing
      ? Object.keys(config.processing.inputs).map((name) => ({ name, datatype: 'BYTES', shape: [-1] }))
      : config.inputs.map(tensorMetadata),
    outputs: config.outputs.map(tensorMetadata),
  };
}

export function modelReady(gateway: Gateway, model: string, version?: string): boolean {
  const config = gateway.modelConfig(model);
  const info = gateway.modelInfo(config.name);
  return checkVersion(info.versions, config.name, version || defaultVersion(config)).state === 'ready';
}

/** The repository index, models and workflows; with a caller, only those it may read. */
export function repositoryIndex(gateway: Gateway, caller?: AuthInfo) {
  const models = gateway.listModels().filter((m) => gateway.access.can(caller, 'read', 'model', m.name));
  const workflows = gateway.workflows
    .list()
    .filter((w) => !gateway.registry.has(w.name) && gateway.access.can(caller, 'read', 'workflow', w.name));
  return [
    ...models.flatMap((m) =>
      m.versions.map((v) => ({
        name: m.name,
        version: v.version,
        state: v.state === 'ready' ? 'READY' : v.state === 'loading' ? 'LOADING' : 'UNAVAILABLE',
        reason: v.error ?? (v.state === 'ready' || v.state === 'loading' ? '' : v.state),
      })),
    ),
    ...workflows.map((w) => ({
      name: w.name,
      version: WORKFLOW_VERSION,
      state: w.state === 'ready' ? 'READY' : 'UNAVAILABLE',
      reason: w.error ?? '',
    })),
  ];
}

/** The outputs a request names must exist; UNKNOWN_OUTPUT before any work is done. */
export function checkOutputs(gateway: Gateway, model: string, names: string[]): void {
  const config = gateway.modelConfig(model);
  for (const name of names) {
    if (!config.outputs.some((o) => o.name === name))
      throw tgError(
        'UNKNOWN_OUTPUT',
        `output "${name}" is not declared by ${config.name}; it has ${config.outputs.map((o) => o.name).join(', ')}`,
        { output: name },
      );
  }
}

// ---- workflows, served like models (Triton's ensembles) -----------------------------------------

/** Workflows have one version as far as OIP v2 is concerned. */
export const WORKFLOW_VERSION = '1';

/** A name OIP v2 serves: a model, else a registered workflow. */
export function isWorkflow(gateway: Gateway, name: string): boolean {
  // The in-memory catalogue first: a model's request (the common case) never reaches the registry.
  return gateway.workflows.has(name) && !gateway.registry.has(name);
}

/** What the access check of a /v2/models/NAME route is about. */
export function kindOf(gateway: Gateway, name: string): 'model' | 'workflow' {
  return isWorkflow(gateway, name) ? 'workflow' : 'model';
}

function checkWorkflowVersion(name: string, version: string | undefined): void {
  if (version && version !== WORKFLOW_VERSION)
    throw tgError(
      'VERSION_NOT_FOUND',
      `workflow ${name} has one version, ${WORKFLOW_VERSION}; it has no version ${version}`,
      {
        model: name,
        version,
      },
    );
}

/** GET /v2/models/NAME[/versions/V]: a model's or a workflow's metadata, if the caller may read it. */
export function metadataFor(gateway: Gateway, caller: AuthInfo | undefined, name: string, version?: string) {
  gateway.access.check(caller, 'read', kindOf(gateway, name), name);
  return isWorkflow(gateway, name) ? workflowMetadata(gateway, name, version) : modelMetadata(gateway, name, version);
}

/** GET /v2/models/NAME[/versions/V]/ready, if the caller may read the model or workflow. */
export function readinessFor(gateway: Gateway, caller: AuthInfo | undefined, name: string, version?: string): boolean {
  gateway.access.check(caller, 'read', kindOf(gateway, name), name);
  return isWorkflow(gateway, name) ? workflowReady(gateway, name, version) : modelReady(gateway, name, version);
}

export function workflowMetadata(gateway: Gateway, name: string, version?: string) {
  checkWorkflowVersion(name, version);
  const plan = gateway.workflows.plan(name);
  return {
    name,
    versions: [WORKFLOW_VERSION],
    platform: 'ensemble',
    // Inputs taken as files or texts are BYTES, one element per file or text, as for a model.
    inputs: plan.definition.inputs.map((input) =>
      isProcessedInput(input) ? { name: input.name, datatype: 'BYTES', shape: [-1] } : tensorMetadata(input),
    ),
    // An output whose alternatives end in a literal is listed with its tensor type; when the
    // literal is what a request gets, it comes back in the response's parameters instead.
    outputs: plan.outputs.flatMap((o) => (o.spec ? [tensorMetadata(o.spec)] : [])),
  };
}

/** Ready when it compiles and every model it runs has its default version ready. */
export function workflowReady(gateway: Gateway, name: string, version?: string): boolean {
  checkWorkflowVersion(name, version);
  const info = gateway.workflows.info(name);
  if (info.state !== 'ready') return false;
  return info.models.every((m) => {
    const model = gateway.modelInfo(m);
    return model.versions.find((v) => v.version === model.default_version)?.state === 'ready';
  });
}

/**
 * Runs a workflow for an OIP v2 request: tensor outputs as an infer result's, and what OIP has no
 * tensor for (literal outputs, the stages' records) as response parameters of JSON text.
 */
export async function inferWorkflow(
  gateway: Gateway,
  name: string,
  version: string | undefined,
  request: Pick<OipInferRequestLike, 'id' | 'parameters' | 'inputs' | 'form'>,
  options: InferOptions,
): Promise<{ result: TensorInferenceResult; parameters: Record<string, string | number> }> {
  checkWorkflowVersion(name, version);
  const { run, request_id, start, decode_ms } = await executeWorkflowRequest(
    gateway,
    {
      workflow: name,
      request_id: request.id,
      parameters: request.parameters,
      decode: (plan) => preparedWorkflowInputs(plan, request.inputs, request.form, gateway),
    },
    options,
  );
  const outputs = run.outputs.flatMap((o) => ('tensor' in o ? [{ name: o.name, tensor: o.tensor }] : []));
  const literals = Object.fromEntries(run.outputs.flatMap((o) => ('value' in o ? [[o.name, o.value]] : [])));
  const ms = (x: number) => Math.round(x * 1000) / 1000;
  const total = ms(performance.now() - start);
  return {
    result: {
      request_id,
      model: name,
      version: WORKFLOW_VERSION,
      variant: 'workflow',
      batch_size: Math.max(0, ...run.stages.map((s) => s.batch_size ?? 0)),
      outputs,
      timings: { decode_ms, queue_ms: 0, transfer_ms: 0, compute_ms: 0, encode_ms: 0, total_ms: total },
    },
    parameters: {
      decode_ms,
      run_ms: run.run_ms,
      total_ms: total,
      stages: JSON.stringify(run.stages),
      ...(Object.keys(literals).length ? { literal_outputs: JSON.stringify(literals) } : {}),
    },
  };
}

/** What both encodings decode an infer request into. */
interface OipInferRequestLike {
  id?: string | undefined;
  parameters: Record<string, unknown>;
  inputs: Map<string, TensorSource>;
  form: InputForm;
}

/** The outputs a workflow request names must be the workflow's. */
export function checkWorkflowOutputs(gateway: Gateway, name: string, names: string[]): void {
  const outputs = gateway.workflows.plan(name).outputs.map((o) => o.name);
  for (const output of names)
    if (!outputs.includes(output))
      throw tgError(
        'UNKNOWN_OUTPUT',
        `output "${output}" is not declared by workflow ${name}; it has ${outputs.join(', ')}`,
        {
          output,
        },
      );
}
