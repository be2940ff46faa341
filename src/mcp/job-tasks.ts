import {
  type CallToolResult,
  type McpServer,
  ProtocolError,
  ProtocolErrorCode,
  RELATED_TASK_META_KEY,
  type ServerContext,
  type Task,
} from '@modelcontextprotocol/server';
import { z } from 'zod';
import { asTensorgateError } from '../errors.js';
import type { Gateway } from '../gateway.js';
import { checkJobAccess, jobAllowed } from '../jobs/access.js';
import type { JobInfo } from '../jobs/job-manager.js';
import { jobLine, jobResult, StartJobArgs } from './job-tools.js';
import { actorOf, callerOf } from './results.js';

/**
 * MCP tasks (protocol revision 2025-11-25) over batch jobs: a client that supports tasks calls
 * start_job with `task` in its params and gets a task at once (CreateTaskResult); the task is the
 * job, polled with `tasks/get`, its summary fetched with `tasks/result` (which waits for the job to
 * end), listed with `tasks/list` and stopped with `tasks/cancel`. Every job is a task, whoever
 * started it and however (start_job, the REST API, the CLI), and tasks live as long as their jobs:
 * in the registry database, across restarts, hence `ttl: null`.
 *
 * The SDK carries the 2025-11-25 task vocabulary on the wire (schemas, the `tasks/*` methods) but no
 * runtime for it, and its tools/call dispatch hides `params.task` from tool callbacks. So the
 * tools/call handler McpServer installs is wrapped on its way in (the one place tensorgate reaches
 * around McpServer), and a task-augmented call to start_job is answered here. Sessions on the
 * 2026-07-28 revision have none of this (the SDK removes `capabilities.tasks` and `execution` from
 * what they see; tasks there are the SEP-2663 extension): they use start_job's `wait` and get_job.
 */

/** What tasks/get suggests a client waits between polls. */
const POLL_INTERVAL_MS = 1000;

const TERMINAL = new Set<JobInfo['state']>(['completed', 'failed', 'cancelled']);

/** A job as a task. A paused job is still working: it goes on once resume_job is called. */
export function taskOf(job: JobInfo): Task {
  const status = job.state === 'running' || job.state === 'paused' ? 'working' : job.state;
  return {
    taskId: job.id,
    status,
    statusMessage: job.state === 'paused' ? `${jobLine(job)}; call resume_job once the cause is fixed` : jobLine(job),
    createdAt: job.created_at,
    lastUpdatedAt: job.updated_at,
    ttl: null,
    pollInterval: POLL_INTERVAL_MS,
  };
}

/** A tensorgate error as the JSON-RPC error of a tasks request: the code leads the message, as in tool results. */
function protocolError(err: unknown): ProtocolError {
  if (err instanceof ProtocolError) return err;
  const error = asTensorgateError(err);
  return new ProtocolError(ProtocolErrorCode.InvalidParams, `${error.code}: ${error.message}`, error.toJSON());
}

async function withProtocolErrors<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw protocolError(err);
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    const stop = () => {
      clearTimeout(timer);
      resolve();
    };
    signal.addEventListener('abort', stop, { once: true });
  });
}

/** Waits for a job to end: completed, failed or cancelled; a paused one until it is resumed and ends. */
async function untilTerminal(gateway: Gateway, id: string, signal: AbortSignal): Promise<JobInfo> {
  for (;;) {
    const job = await gateway.jobs.settled(id);
    if (TERMINAL.has(job.state) || signal.aborted) return job;
    await sleep(POLL_INTERVAL_MS, signal); // paused, or stopped with the server: look again
  }
}

type ToolsCallHandler = (request: ToolsCallRequest, ctx: ServerContext) => Promise<unknown>;
interface ToolsCallRequest {
  method: 'tools/call';
  params: { name: string; arguments?: Record<string, unknown>; task?: { ttl?: number | null } };
}

/** start_job called with `task`: the job starts and its task is the answer. */
async function startJobTask(
  server: McpServer,
  gateway: Gateway,
  args: Record<string, unknown> | undefined,
  ctx: ServerContext,
) {
  const parsed = StartJobArgs.safeParse(args ?? {});
  if (!parsed.success)
    throw new ProtocolError(
      ProtocolErrorCode.InvalidParams,
      `Invalid arguments for start_job: ${parsed.error.message}`,
    );
  const { wait: _wait, ...spec } = parsed.data; // a task never waits: tasks/result does
  return withProtocolErrors(async () => {
    checkJobAccess(gateway, callerOf(ctx), 'execute', spec);
    const job = await gateway.jobs.start(spec, actorOf(server, ctx));
    const task = taskOf(job);
    // The SDK checks every tools/call answer as a CallToolResult (content required); a CreateTaskResult
    // with content is both, so clients without task support still read what happened.
    return {
      task,
      content: [
        {
          type: 'text',
          text: `${jobLine(job)}. Task ${job.id}: poll it with tasks/get, get its summary with tasks/result.`,
        },
      ],
    };
  });
}

const TaskIdParams = z.object({ taskId: z.string() });
const TaskListParams = z.object({ cursor: z.string().optional() });

/** The tools that take `task`: only start_job, whose work outlives a call. */
const TASK_TOOLS = new Set(['start_job']);

/**
 * Declares the tasks capability, answers the tasks/* methods, and wraps the tools/call handler so a
 * task-augmented start_job becomes a task. Called on a new McpServer before any tool is registered.
 */
export function registerJobTasks(server: McpServer, gateway: Gateway): void {
  const protocol = server.server;
  protocol.registerCapabilities({
    tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } },
  });

  const setRequestHandler = protocol.setRequestHandler.bind(protocol) as (
    method: string,
    handler: ToolsCallHandler,
  ) => void;
  (protocol as { setRequestHandler: unknown }).setRequestHandler = (method: string, handler: unknown, ...rest: []) => {
    if (method !== 'tools/call' || typeof handler !== 'function' || rest.length)
      return (setRequestHandler as (...a: unknown[]) => void)(method, handler, ...rest);
    const plain = handler as ToolsCallHandler;
    return setRequestHandler(method, (request, ctx) => {
      const { name, arguments: args, task } = request.params;
      if (task === undefined) return plain(request, ctx);
      if (!TASK_TOOLS.has(name))
        throw new ProtocolError(
          ProtocolErrorCode.MethodNotFound,
          `tool ${name} does not run as a task (its execution.taskSupport is forbidden); call it without "task", or run it over many items with start_job`,
        );
      return startJobTask(server, gateway, args, ctx);
    });
  };

  // The SDK types offer no tasks/* methods (no runtime), so they are registered with their params' schemas.
  protocol.setRequestHandler('tasks/get', { params: TaskIdParams }, ({ taskId }, ctx) =>
    withProtocolErrors(async () => {
      checkJobAccess(gateway, callerOf(ctx), 'read', await gateway.jobs.targetOf(taskId));
      return taskOf(await gateway.jobs.get(taskId));
    }),
  );

  protocol.setRequestHandler('tasks/result', { params: TaskIdParams }, ({ taskId }, ctx) =>
    withProtocolErrors(async () => {
      checkJobAccess(gateway, callerOf(ctx), 'read', await gateway.jobs.targetOf(taskId));
      const job = await untilTerminal(gateway, taskId, ctx.mcpReq.signal);
      const result: CallToolResult = jobResult(job);
      if (job.state === 'failed') result.isError = true;
      result._meta = { ...result._meta, [RELATED_TASK_META_KEY]: { taskId } };
      return result;
    }),
  );

  protocol.setRequestHandler('tasks/list', { params: TaskListParams }, (_params, ctx) =>
    withProtocolErrors(async () => {
      const caller = callerOf(ctx);
      const jobs = (await gateway.jobs.list()).filter((job) => jobAllowed(gateway, caller, 'read', job));
      return { tasks: jobs.map(taskOf) };
    }),
  );

  protocol.setRequestHandler('tasks/cancel', { params: TaskIdParams }, ({ taskId }, ctx) =>
    withProtocolErrors(async () => {
      checkJobAccess(gateway, callerOf(ctx), 'execute', await gateway.jobs.targetOf(taskId));
      const before = await gateway.jobs.get(taskId);
      if (TERMINAL.has(before.state))
        throw new ProtocolError(
          ProtocolErrorCode.InvalidParams,
          `task ${taskId} is already ${before.state}; only a working task can be cancelled`,
        );
      return taskOf(await gateway.jobs.cancel(taskId));
    }),
  );
}
