import type { CallToolResult, McpServer, RegisteredTool, StandardSchemaWithJSON } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { Gateway, InferenceResult } from '../gateway.js';
import { defaultVersion, type ModelConfig } from '../registry/model-config.js';
import type { ProcessedInputConfig, ProcessedOutputConfig } from '../registry/processing.js';
import { inputForms } from '../requests/decode-processed.js';
import { TENSOR_INPUT_FORMS } from '../requests/inference-request.js';
import { isProcessedInput, type WorkflowPlan } from '../workflows/definition.js';
import { checkWorkflowAccess, runWorkflow } from '../workflows/run-workflow.js';
import { requestSignal } from './connection-signal.js';
import { definedOnce } from './output-schemas.js';
import { callerOf, errorResult } from './results.js';
import {
  DetectionsOut,
  detectionLines,
  EmbeddingOut,
  embeddingLine,
  ImagesOut,
  InferOut,
  imageContent,
  imageLines,
  inferResult,
  PredictionsOut,
  predictionLines,
  TimingsOut,
  timingsLine,
} from './tools.js';
import { RunOut, workflowResult } from './workflow-tools.js';

/**
 * One MCP tool per model with processing: "digits" taking {"image": "/photos/seven.png"} and
 * answering labels, where `infer` needs the model's name and its inputs' forms. Its schemas are
 * generated from the config, once per config (a server is built per HTTP request). A long-lived
 * server (stdio, an HTTP session) follows the gateway: a model's tool is listed while its default
 * version is loading or ready (for an on_demand model, whenever it has not failed: a call loads
 * it), and the SDK sends `notifications/tools/list_changed` whenever that changes.
 */

interface Definition {
  title: string;
  description: string;
  inputSchema: z.ZodObject;
  outputSchema: StandardSchemaWithJSON;
  annotations: { readOnlyHint: true; idempotentHint: true; openWorldHint: false };
}

const definitions = new WeakMap<ModelConfig, Definition>();

/** A model tool's structured answer: the request, `field` (the answer), and the stages' times. */
function answerOut(field: string, answer: z.ZodType) {
  return z.object({
    request_id: z.string(),
    model: z.string(),
    version: z.string(),
    [field]: answer,
    batch_size: z.number().int().describe('items in the forward pass that served this call (more when batched)'),
    timings: TimingsOut,
  });
}

const ImagesAnswerOut = answerOut('images', ImagesOut);

const outputSchemas = {
  classification: answerOut('predictions', PredictionsOut),
  detection: answerOut('detections', DetectionsOut),
  embedding: answerOut('embedding', EmbeddingOut),
  image: ImagesAnswerOut,
  mask: ImagesAnswerOut,
  text: answerOut('texts', z.array(z.string()).describe("per item, the model's tokens decoded")),
  none: InferOut,
};

function definitionOf(config: ModelConfig): Definition {
  let definition = definitions.get(config);
  if (definition) return definition;
  const processing = config.processing as NonNullable<ModelConfig['processing']>;
  const output = processing.output;
  const shape: Record<string, z.ZodType> = {};
  const takes: string[] = [];
  for (const [name, input] of Object.entries(processing.inputs)) {
    shape[name] = inputSchema(input);
    takes.push(`"${name}"${input.description ? ` (${input.description})` : ''}: ${inputForms(input)}`);
  }
  if (output?.type === 'detection')
    shape.threshold = z
      .number()
      .min(0)
      .max(1)
      .optional()
      .describe(`leave out objects scoring under this (default ${output.threshold})`);
  if (output?.type === 'classification') {
    shape.top_k = z
      .number()
      .int()
      .min(1)
      .max(100)
      .optional()
      .describe(`how many labels to answer per item (default ${output.top_k})`);
    shape.threshold = z.number().min(0).max(1).optional().describe('leave out labels scoring under this');
  }
  shape.version = z.string().optional().describe('model version; the default version when omitted');
  const answers = answerDescription(output);
  definition = definedOnce({
    title: processing.tool.title ?? `${config.name} (model)`,
    description:
      processing.tool.description ??
      `${config.description.trim()} Takes ${takes.join('; ')}. ${answers}, and the time of each stage.`,
    inputSchema: z.object(shape),
    outputSchema: outputSchemas[output?.type ?? 'none'],
    annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  });
  definitions.set(config, definition);
  return definition;
}

/** What the tool answers, for its description. */
function answerDescription(output: ProcessedOutputConfig | undefined): string {
  switch (output?.type) {
    case 'classification':
      return `Answers the top ${output.top_k} labels per item with their probability`;
    case 'detection':
      return "Answers the objects found in each image: label, score and box [x1, y1, x2, y2] in the image's own pixels";
    case 'embedding':
      return `Answers a tensor:// handle of one ${output.normalize ? 'unit-length ' : ''}vector per item (pass it to a later call or read it as a resource)`;
    case 'image':
      return 'Answers a PNG image per item';
    case 'mask':
      return "Answers a PNG mask per item, a colour per class, with each class's share of the pixels";
    case 'text':
      return 'Answers a text per item';
    case undefined:
      return 'Answers the model outputs';
  }
}

/** A processed input's argument: one item or a list of them, described for the agent. */
function inputSchema(input: ProcessedInputConfig): z.ZodType {
  const one = z.string();
  const many = z.array(z.string()).min(1);
  switch (input.type) {
    case 'image':
      return z
        .union([one, many])
        .describe(
          `${input.description ?? 'the image'}: an absolute path or file:// URL of a ${input.formats.map((f) => f.toUpperCase()).join(', ')} file, a data: URI, base64 of the file, or a tensor:// handle of pictures; a list for several images`,
        );
    case 'audio':
      return z
        .union([one, many])
        .describe(
          `${input.description ?? 'the recording'}: an absolute path or file:// URL of a WAV file, a data: URI, or base64 of the file; a list for several recordings`,
        );
    case 'text':
      return z
        .union([one, many])
        .describe(
          `${input.description ?? 'the text'}: a string, or a list of strings for several texts (up to ${input.max_length} tokens each${input.truncation === 'truncate' ? '; longer texts are cut' : ''})`,
        );
  }
}

/** The answer of a model's tool: labels or an embedding's handle first, then the stages' times. */
function answerResult(result: InferenceResult): CallToolResult {
  const { predictions, detections, embedding, images, texts } = result;
  const lines = [
    ...(predictions ? predictionLines(predictions) : []),
    ...(detections ? detectionLines(detections) : []),
    ...(embedding ? [embeddingLine(embedding)] : []),
    ...(images ? imageLines(images) : []),
    ...(texts ?? []),
    timingsLine(result.timings),
  ];
  const pictures = images ? imageContent(images) : undefined;
  return {
    content: [
      { type: 'text', text: lines.join('\n') },
      ...(pictures?.content ?? []),
      ...(embedding
        ? [
            {
              type: 'resource_link' as const,
              uri: embedding.uri,
              name: `${result.model}-${embedding.output}.npy`,
              mimeType: 'application/x-npy',
              description: `${embedding.items} x ${embedding.dims} embedding of request ${result.request_id}`,
            },
          ]
        : []),
    ],
    structuredContent: {
      request_id: result.request_id,
      model: result.model,
      version: result.version,
      ...(predictions ? { predictions } : {}),
      ...(detections ? { detections } : {}),
      ...(embedding ? { embedding } : {}),
      ...(pictures ? { images: pictures.structured } : {}),
      ...(texts ? { texts } : {}),
      batch_size: result.batch_size,
      timings: result.timings,
    },
  };
}

/**
 * A workflow's own tool, for a workflow taking files or texts: "vision-pipeline" taking
 * {"image": "/photos/street.jpg"}, answering like run_workflow.
 */
const workflowDefinitions = new WeakMap<WorkflowPlan, Definition>();

function workflowDefinitionOf(plan: WorkflowPlan): Definition {
  let definition = workflowDefinitions.get(plan);
  if (definition) return definition;
  const shape: Record<string, z.ZodType> = {};
  const takes: string[] = [];
  for (const input of plan.definition.inputs) {
    if (isProcessedInput(input)) {
      const config = plan.processed[input.name] as ProcessedInputConfig;
      const described = { ...config, ...(input.description ? { description: input.description } : {}) };
      shape[input.name] = inputSchema(described);
      takes.push(`"${input.name}": ${inputForms(described)}`);
    } else {
      shape[input.name] = z.unknown().describe(`${input.dtype}[${input.shape.join(', ')}]. ${TENSOR_INPUT_FORMS}`);
      takes.push(`"${input.name}": a ${input.dtype} tensor [${input.shape.join(', ')}]`);
    }
  }
  definition = definedOnce({
    title: `${plan.definition.name} (workflow)`,
    description: `${plan.definition.description.trim()} Takes ${takes.join('; ')}. Runs ${plan.stages.length} stages server-side; answers each output (a summary and a tensor:// handle, or a literal value), every stage's status and the time of each.`,
    inputSchema: z.object(shape),
    outputSchema: RunOut,
    annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  });
  workflowDefinitions.set(plan, definition);
  return definition;
}

/** Whether a model's tool is listed now. */
function serving(gateway: Gateway, model: string, config: ModelConfig): boolean {
  const state = gateway.versionState(model, defaultVersion(config));
  return state === 'ready' || state === 'loading' || (config.load === 'on_demand' && state !== 'failed');
}

/** The ready workflows that take files or texts, by name, with their plans. */
function workflowsTakingFiles(gateway: Gateway): Map<string, WorkflowPlan> {
  const wanted = new Map<string, WorkflowPlan>();
  for (const name of gateway.workflows.names()) {
    if (gateway.workflows.info(name).state !== 'ready') continue;
    const plan = gateway.workflows.plan(name);
    if (Object.keys(plan.processed).length > 0) wanted.set(name, plan);
  }
  return wanted;
}

/**
 * The tools of the models with processing and of the workflows taking files or texts, following
 * the gateway: registered and listed as they become served, removed as they go, each change sent
 * as `notifications/tools/list_changed` by the SDK.
 */
export function registerModelTools(server: McpServer, gateway: Gateway, { live }: { live: boolean }): void {
  const tools = new Map<string, { tool: RegisteredTool; config: ModelConfig }>();
  const workflowTools = new Map<string, { tool: RegisteredTool; plan: WorkflowPlan }>();

  const registerWorkflow = (workflow: string, plan: WorkflowPlan): RegisteredTool => {
    const handler = async (args: Record<string, unknown>, ctx: unknown): Promise<CallToolResult> => {
      try {
        checkWorkflowAccess(gateway, callerOf(ctx), workflow);
        const signal = (ctx as { mcpReq?: { signal?: AbortSignal } }).mcpReq?.signal;
        const result = await runWorkflow(
          gateway,
          { workflow, inputs: args },
          { signal: signal ? requestSignal(signal) : undefined, adapter: 'mcp' },
        );
        return workflowResult(result);
      } catch (err) {
        return errorResult(err);
      }
    };
    const definition = workflowDefinitionOf(plan);
    try {
      return server.registerTool(workflow, definition, handler);
    } catch {
      // A built-in tool or a model's tool has the name.
      return server.registerTool(`${workflow}_workflow`, definition, handler);
    }
  };

  const register = (model: string, config: ModelConfig): RegisteredTool => {
    const definition = definitionOf(config);
    const handler = async (args: Record<string, unknown>, ctx: unknown): Promise<CallToolResult> => {
      try {
        gateway.access.check(callerOf(ctx), 'execute', 'model', model);
        const { version, top_k, threshold, ...inputs } = args;
        const parameters = {
          ...(top_k !== undefined ? { top_k } : {}),
          ...(threshold !== undefined ? { threshold } : {}),
        };
        const signal = (ctx as { mcpReq?: { signal?: AbortSignal } }).mcpReq?.signal;
        const result = await gateway.infer(
          { model, ...(typeof version === 'string' ? { version } : {}), inputs, parameters },
          { signal: signal ? requestSignal(signal) : undefined, adapter: 'mcp' },
        );
        return config.processing?.output ? answerResult(result) : inferResult(result);
      } catch (err) {
        return errorResult(err);
      }
    };
    const name = config.processing?.tool.name ?? model;
    try {
      return server.registerTool(name, definition, handler);
    } catch {
      // A built-in tool (or another model's) has the name.
      return server.registerTool(`${name}_model`, definition, handler);
    }
  };

  const sync = (): void => {
    const wanted = new Map<string, ModelConfig>();
    for (const name of gateway.registry.names()) {
      const config = gateway.modelConfig(name);
      if (config.processing) wanted.set(name, config);
    }
    for (const [model, entry] of tools)
      if (wanted.get(model) !== entry.config) {
        entry.tool.remove();
        tools.delete(model);
      }
    for (const [model, config] of wanted) {
      let entry = tools.get(model);
      if (!entry) {
        entry = { tool: register(model, config), config };
        tools.set(model, entry);
      }
      const listed = serving(gateway, model, config);
      if (entry.tool.enabled !== listed) {
        if (listed) entry.tool.enable();
        else entry.tool.disable();
      }
    }
    const workflows = workflowsTakingFiles(gateway);
    for (const [workflow, entry] of workflowTools)
      if (workflows.get(workflow) !== entry.plan) {
        entry.tool.remove();
        workflowTools.delete(workflow);
      }
    for (const [workflow, plan] of workflows)
      if (!workflowTools.has(workflow)) workflowTools.set(workflow, { tool: registerWorkflow(workflow, plan), plan });
  };

  sync();
  if (!live) return;
  const detach = gateway.onModelsChanged(sync);
  const previous = server.server.onclose;
  server.server.onclose = () => {
    detach();
    previous?.();
  };
}
