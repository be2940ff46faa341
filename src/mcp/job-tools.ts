import { basename, extname } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { CallToolResult, McpServer, ServerContext } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { Gateway } from '../gateway.js';
import { checkJobAccess, jobAllowed } from '../jobs/access.js';
import type { JobInfo } from '../jobs/job-manager.js';
import { JobSpecSchema } from '../jobs/spec.js';
import { schemaSharingRegistrar } from './output-schemas.js';
import { actorOf, callerOf, errorResult, jsonResult } from './results.js';

/**
 * start_job, get_job, list_jobs, cancel_job, resume_job: a model run over a folder of files or a
 * file of texts, server-side, its answers written to a results file. The agent gets a job id at
 * once (or, with `wait`, progress notifications and then the summary) and a link to the results
 * file, never thousands of answers in its context (docs/jobs.md).
 */

/** Progress notifications of a waiting start_job are at least this far apart (the last one aside). */
const PROGRESS_EVERY_MS = 250;

export const JobOut = z.object({
  id: z.string(),
  model: z.string().optional().describe('the model it runs'),
  workflow: z.string().optional().describe('or the workflow'),
  version: z.string().optional(),
  state: z.enum(['running', 'paused', 'completed', 'failed', 'cancelled']),
  results: z
    .string()
    .describe(
      'the JSONL, CSV or Parquet file the answers go to, one line (row) per item: {"index", "item", answer or "error"}; a Parquet file is written when the job ends',
    ),
  tensors: z
    .record(z.string(), z.string())
    .optional()
    .describe('with "tensors": "npy", each output\'s .npy file, row i holding item i (valid at every commit)'),
  items: z.number().int(),
  done: z.number().int().describe('items whose line is written, failed ones included'),
  failed: z.number().int(),
  errors: z.record(z.string(), z.number()).describe('failed items by error code'),
  failed_items: z
    .record(z.string(), z.array(z.string()))
    .optional()
    .describe('the first failed items of each code (the results file has every one, with its message)'),
  ms_per_item: z
    .record(z.string(), z.number())
    .optional()
    .describe(
      "where the time went: each stage's milliseconds per item (decode, preprocess, queue, transfer, compute, postprocess, encode)",
    ),
  items_per_second: z.number().optional().describe('while it runs, its pace; after, over its running time'),
  eta_s: z.number().optional().describe('seconds left at the current pace'),
  in_flight: z
    .number()
    .int()
    .optional()
    .describe('items sent to the model and not yet answered; one while the job gives way to interactive calls'),
  error: z
    .string()
    .optional()
    .describe('why a failed or paused job stopped; a paused one starts with its code (DISK_FULL: ...)'),
  created_at: z.string(),
  created_by: z.string().nullable(),
  updated_at: z.string(),
});

/** "job 3f2a… (digits): running, 640/12000 items, 2 failed (BAD_IMAGE 2), 410 items/s, ETA 28 s". */
export function jobLine(job: JobInfo): string {
  const failed = job.failed
    ? `, ${job.failed} failed (${Object.entries(job.errors)
        .map(([c, n]) => `${c} ${n}`)
        .join(', ')})`
    : '';
  // While it runs; a stopped job's pace is in its summary (jobSummary).
  const pace = job.eta_s !== undefined ? `, ${job.items_per_second} items/s, ETA ${job.eta_s} s` : '';
  const error = job.error ? `: ${job.error}` : '';
  const runs = job.model ?? `workflow ${job.workflow}`;
  return `job ${job.id} (${runs}): ${job.state}${error}, ${job.done}/${job.items} items${failed}${pace}; results in ${job.results}`;
}

const RESULTS_MIME_TYPES: Record<string, string> = { '.csv': 'text/csv', '.parquet': 'application/vnd.apache.parquet' };

/** A stopped job's summary under its line: which items failed, where the time went. */
function jobSummary(job: JobInfo): string {
  if (job.state === 'running') return '';
  const failed = Object.entries(job.failed_items ?? {}).map(
    ([code, items]) => `\n${code}: ${items.join(', ')}${(job.errors[code] ?? 0) > items.length ? ', ...' : ''}`,
  );
  const stages = Object.entries(job.ms_per_item ?? {}).map(([stage, ms]) => `${stage} ${ms}`);
  const speed = job.items_per_second !== undefined ? `\n${job.items_per_second} items/s` : '';
  return `${speed}${stages.length ? `${speed ? ';' : '\n'} ms per item: ${stages.join(', ')}` : ''}${failed.join('')}`;
}

/** The job's summary, with a link to its results file for clients that open files. */
export function jobResult(job: JobInfo): CallToolResult {
  const result = jsonResult(`${jobLine(job)}${jobSummary(job)}`, { ...job });
  result.content.push({
    type: 'resource_link',
    uri: pathToFileURL(job.results).href,
    name: basename(job.results),
    mimeType: RESULTS_MIME_TYPES[extname(job.results).toLowerCase()] ?? 'application/jsonl',
    description: `the answers of job ${job.id}, one line per item in item order`,
  });
  return result;
}

/**
 * Waits for a job to stop, sending its progress (items done of all) as MCP progress notifications
 * when the client asked for them. A client giving up on the call leaves the job running.
 */
async function waitForJob(gateway: Gateway, job: JobInfo, ctx: ServerContext): Promise<JobInfo> {
  const token = ctx.mcpReq._meta?.progressToken;
  let sentAt = Number.NEGATIVE_INFINITY;
  const stopWatching = gateway.jobs.watch(job.id, (current) => {
    const now = performance.now();
    if (token === undefined || (now - sentAt < PROGRESS_EVERY_MS && current.done < current.items)) return;
    sentAt = now;
    ctx.mcpReq
      .notify({
        method: 'notifications/progress',
        params: { progressToken: token, progress: current.done, total: current.items, message: jobLine(current) },
      })
      .catch(() => {}); // the client went away: the job goes on
  });
  const gaveUp = new Promise<void>((resolve) => ctx.mcpReq.signal.addEventListener('abort', () => resolve()));
  try {
    await Promise.race([gateway.jobs.settled(job.id), gaveUp]);
    return await gateway.jobs.get(job.id);
  } finally {
    stopWatching();
  }
}

export const StartJobArgs = JobSpecSchema.extend({
  wait: z
    .boolean()
    .default(false)
    .describe(
      'answer when the job stops rather than at once, sending progress notifications meanwhile (when the call asks for progress)',
    ),
});

export function registerJobTools(server: McpServer, gateway: Gateway): void {
  const register = schemaSharingRegistrar(server);

  const startJob = register(
    'start_job',
    () => ({
      title: 'Start a batch job',
      description:
        'Runs a model (or a workflow) that takes files or texts over many of them server-side: every file of a folder (optionally matching a pattern), a list of files, each line of a text file, or a column of a JSONL, CSV or Parquet table. Returns a job id at once (with "wait": true, when the job stops, with progress notifications meanwhile); the answers go to a JSONL, CSV or Parquet results file, one line (row) per item, and get_job reports progress. Use it instead of calling a model once per item.',
      inputSchema: StartJobArgs,
      outputSchema: JobOut,
      annotations: { readOnlyHint: false, idempotentHint: false, openWorldHint: false },
    }),
    async ({ wait, ...spec }, ctx) => {
      try {
        checkJobAccess(gateway, callerOf(ctx), 'execute', spec);
        const job = await gateway.jobs.start(spec, actorOf(server, ctx));
        return jobResult(wait ? await waitForJob(gateway, job, ctx) : job);
      } catch (err) {
        return errorResult(err);
      }
    },
  );
  // 2025-11-25 sessions may call it as a task (job-tasks.ts); McpServer's registerTool takes no `execution`.
  startJob.execution = { taskSupport: 'optional' };

  register(
    'get_job',
    () => ({
      title: 'Get a batch job',
      description: "A job's state and progress: items done and failed (by error code), items/s, ETA, results file.",
      inputSchema: z.object({ id: z.string().describe('the id start_job answered') }),
      outputSchema: JobOut,
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    }),
    async ({ id }, ctx) => {
      try {
        checkJobAccess(gateway, callerOf(ctx), 'read', await gateway.jobs.targetOf(id));
        return jobResult(await gateway.jobs.get(id));
      } catch (err) {
        return errorResult(err);
      }
    },
  );

  register(
    'list_jobs',
    () => ({
      title: 'List batch jobs',
      description: 'Every batch job recorded, newest first, with its state and progress.',
      inputSchema: z.object({}),
      outputSchema: z.object({ jobs: z.array(JobOut) }),
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    }),
    async (_args, ctx) => {
      try {
        const caller = callerOf(ctx);
        const jobs = (await gateway.jobs.list()).filter((j) => jobAllowed(gateway, caller, 'read', j));
        return jsonResult(jobs.length ? jobs.map(jobLine).join('\n') : 'No batch jobs are recorded.', { jobs });
      } catch (err) {
        return errorResult(err);
      }
    },
  );

  register(
    'cancel_job',
    () => ({
      title: 'Cancel a batch job',
      description:
        'Stops a running or paused job: requests in flight are withdrawn; the results file keeps every line written so far, each item at most once.',
      inputSchema: z.object({ id: z.string().describe('the id start_job answered') }),
      outputSchema: JobOut,
      annotations: { readOnlyHint: false, idempotentHint: true, openWorldHint: false },
    }),
    async ({ id }, ctx) => {
      try {
        checkJobAccess(gateway, callerOf(ctx), 'execute', await gateway.jobs.targetOf(id));
        return jobResult(await gateway.jobs.cancel(id));
      } catch (err) {
        return errorResult(err);
      }
    },
  );

  register(
    'resume_job',
    () => ({
      title: 'Resume a paused batch job',
      description:
        'Runs a paused job (get_job says why it paused, e.g. DISK_FULL) on from its last committed item, once the cause is fixed.',
      inputSchema: z.object({ id: z.string().describe('the id start_job answered') }),
      outputSchema: JobOut,
      annotations: { readOnlyHint: false, idempotentHint: false, openWorldHint: false },
    }),
    async ({ id }, ctx) => {
      try {
        checkJobAccess(gateway, callerOf(ctx), 'execute', await gateway.jobs.targetOf(id));
        return jobResult(await gateway.jobs.resume(id));
      } catch (err) {
        return errorResult(err);
      }
    },
  );
}
