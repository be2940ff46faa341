import type { CallToolResult, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { Gateway } from '../gateway.js';
import { TensorSummarySchema } from '../tensor/summary.js';
import {
  checkWorkflowAccess,
  runWorkflow,
  WorkflowRequestSchema,
  type WorkflowResult,
} from '../workflows/run-workflow.js';
import { requestSignal } from './connection-signal.js';
import { schemaSharingRegistrar } from './output-schemas.js';
import { callerOf, errorResult, jsonResult } from './results.js';

/** list_workflows and run_workflow: graphs of models that run server-side in one call. */

const WorkflowOut = z.object({
  name: z.string(),
  description: z.string(),
  state: z.enum(['ready', 'invalid']),
  error: z.string().optional(),
  inputs: z.array(
    z.object({
      name: z.string(),
      dtype: z.string().optional(),
      shape: z.array(z.number()).optional(),
      type: z.enum(['image', 'text', 'audio']).optional().describe('an input taken as files or texts, not a tensor'),
      description: z.string().optional(),
    }),
  ),
  outputs: z.array(
    z.object({
      name: z.string(),
      dtype: z.string().optional(),
      shape: z.array(z.number()).optional(),
      from: z.array(z.string()).describe('"stage.tensor" or a literal JSON value; the first whose stage ran'),
    }),
  ),
  stages: z.array(
    z.object({
      stage: z.string(),
      model: z.string().optional(),
      workflow: z.string().optional(),
      version: z.string().optional(),
      when: z.string().optional().describe('the conditions it runs under'),
    }),
  ),
  models: z.array(z.string()),
});

const StageOut = z.object({
  stage: z.string(),
  kind: z.enum(['model', 'workflow']),
  target: z.string(),
  version: z.string().optional(),
  status: z.enum(['pending', 'ok', 'skipped', 'failed', 'cancelled', 'not_run']),
  started_ms: z.number().optional().describe('from the start of the run'),
  ended_ms: z.number().optional(),
  timings: z.record(z.string(), z.number()).optional(),
  batch_size: z.number().optional(),
  error: z.string().optional(),
});

export const RunOut = z.object({
  request_id: z.string(),
  workflow: z.string(),
  outputs: z.array(
    z.object({
      name: z.string(),
      dtype: z.string().optional(),
      shape: z.array(z.number()).optional(),
      uri: z.string().optional().describe('tensor:// handle: read it as a resource (.npy) or pass it as a later input'),
      summary: TensorSummarySchema.optional(),
      from: z.string().optional().describe('the stage output it is'),
      value: z.unknown().optional().describe('a literal output of the branch taken'),
    }),
  ),
  stages: z.array(StageOut),
  branches: z.array(z.object({ condition: z.string(), taken: z.boolean().nullable() })),
  timings: z.object({ decode_ms: z.number(), run_ms: z.number(), encode_ms: z.number(), total_ms: z.number() }),
});

export function registerWorkflowTools(server: McpServer, gateway: Gateway): void {
  const register = schemaSharingRegistrar(server);

  register(
    'list_workflows',
    () => ({
      title: 'List workflows',
      description:
        "Lists the workflows this server runs: graphs of models with branches, run server-side in one call by run_workflow. Shows each one's inputs and outputs, its stages and the conditions they run under.",
      inputSchema: z.object({}),
      outputSchema: z.object({ workflows: z.array(WorkflowOut) }),
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    }),
    async (_args, ctx) => {
      try {
        const caller = callerOf(ctx);
        const workflows = gateway.workflows
          .list()
          .filter((w) => gateway.access.can(caller, 'read', 'workflow', w.name));
        const io = (specs: { name: string; dtype?: string; shape?: number[]; type?: string }[]) =>
          specs
            .map((s) =>
              s.dtype ? `${s.name} ${s.dtype}[${s.shape?.join(', ')}]` : s.type ? `${s.name} (${s.type})` : s.name,
            )
            .join(', ');
        const text = workflows.length
          ? workflows
              .map(
                (w) =>
                  `${w.name} (${w.state === 'ready' ? `${w.stages.length} stages` : `invalid: ${w.error}`}) ${w.description} Inputs: ${io(w.inputs)}. Outputs: ${io(w.outputs)}.`,
              )
              .join('\n')
          : 'No workflows are registered.';
        return jsonResult(text, { workflows: workflows.map(({ dir: _d, ...w }) => w) });
      } catch (err) {
        return errorResult(err);
      }
    },
  );

  register(
    'run_workflow',
    () => ({
      title: 'Run a workflow',
      description:
        'Runs a workflow (see list_workflows) on named inputs (tensors, or files and texts for inputs that take them): its stages run server-side, independent ones in parallel, branches decided on earlier outputs, intermediate tensors never leave the server. Returns each output like infer does (summary plus tensor:// handle, or a literal value), and every stage with its status and timings.',
      inputSchema: WorkflowRequestSchema,
      outputSchema: RunOut,
      annotations: { readOnlyHint: true, idempotentHint: false, openWorldHint: false },
    }),
    async (request, ctx) => {
      try {
        // The workflow's grant does not widen the caller's: it must be allowed every model it runs.
        checkWorkflowAccess(gateway, callerOf(ctx), request.workflow);
        const result = await runWorkflow(gateway, request, {
          signal: requestSignal(ctx.mcpReq.signal),
          adapter: 'mcp',
        });
        return workflowResult(result);
      } catch (err) {
        return errorResult(err);
      }
    },
  );
}

export function workflowResult(result: WorkflowResult): CallToolResult {
  const t = result.timings;
  const stageLines = result.stages.map((s) => {
    const span = s.started_ms !== undefined ? ` ${s.started_ms}-${s.ended_ms} ms` : '';
    return `  ${s.stage} (${s.kind} ${s.target}${s.version ? `@${s.version}` : ''}): ${s.status}${span}`;
  });
  const branchLines = result.branches.map(
    (b) => `  if ${b.condition}: ${b.taken === null ? 'not evaluated' : b.taken ? 'then' : 'else'}`,
  );
  const lines = [
    `${result.workflow}: ${result.outputs.map((o) => o.text).join('; ')}`,
    `timings ms: total ${t.total_ms} = decode ${t.decode_ms} + run ${t.run_ms} + encode ${t.encode_ms}`,
    'stages:',
    ...stageLines,
    ...(branchLines.length ? ['branches:', ...branchLines] : []),
  ];
  const tensors = result.outputs.filter((o): o is Extract<typeof o, { uri: string }> => 'uri' in o);
  return {
    content: [
      { type: 'text', text: lines.join('\n') },
      ...tensors.map((o) => ({
        type: 'resource_link' as const,
        uri: o.uri,
        name: `${result.workflow}-${o.name}.npy`,
        mimeType: 'application/x-npy',
        description: `${o.name} ${o.dtype}[${o.shape.join(', ')}] of workflow request ${result.request_id}`,
      })),
    ],
    structuredContent: {
      request_id: result.request_id,
      workflow: result.workflow,
      outputs: result.outputs.map(({ text: _text, ...o }) => o),
      stages: result.stages,
      branches: result.branches,
      timings: result.timings,
    },
  };
}
