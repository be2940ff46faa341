import type { McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { tgError } from '../errors.js';
import type { Gateway } from '../gateway.js';
import { jobAllowed } from '../jobs/access.js';
import { type Diagnosis, diagnoseRequest, diagnoseWindow, type ModelContext } from '../metrics/latency-diagnosis.js';
import { STAGES } from '../metrics/request-window.js';
import { type ModelSnapshot, serverSnapshot, type VersionSnapshot } from '../metrics/snapshot.js';
import { JobOut, jobLine } from './job-tools.js';
import { schemaSharingRegistrar } from './output-schemas.js';
import { callerOf, errorResult, jsonResult } from './results.js';

/**
 * `get_metrics` and `explain_latency`: the server's health and the answer to "where does the time
 * go?" in a form an agent can act on. Both read the recent-request window (src/metrics), and
 * answer compactly: one line per model version, the full figures only when asked for.
 */

const DEFAULT_WINDOW_S = 60;
const windowArg = z
  .number()
  .min(1)
  .max(3600)
  .optional()
  .describe(`seconds of recent traffic to cover (default ${DEFAULT_WINDOW_S})`);

const PercentilesOut = z.object({ p50: z.number(), p90: z.number(), p99: z.number(), mean: z.number() });

const ConciseOut = z.object({
  model: z.string(),
  version: z.string(),
  state: z.string(),
  requests: z.number(),
  rps: z.number().describe('requests per second over the window'),
  p50_ms: z.number(),
  p90_ms: z.number(),
  p99_ms: z.number(),
  error_rate: z.number().describe('failed / all requests, 0-1'),
  top_errors: z.array(z.object({ code: z.string(), count: z.number() })),
  avg_batch: z.number().describe('average rows per forward pass serving a request'),
  queued: z.number(),
  memory_bytes: z
    .number()
    .describe(
      "the workers' memory: their proportional set size (their own pages and their share of those shared with the fork server), or resident memory where that cannot be read",
    ),
  loaded_bytes: z.number().optional().describe('parameters and buffers held'),
});

const FullOut = ConciseOut.extend({
  device: z.string().optional(),
  instances: z.number(),
  busy: z.number(),
  restarts: z.number(),
  rows_per_s: z.number(),
  stages_ms: z.record(z.string(), PercentilesOut),
  batches: z.record(z.string(), z.number()).describe('forward passes by rows per pass, since load'),
  pipelined: z.number().describe('forward passes sent to a worker while it still ran another, since load'),
  input_forms: z.record(z.string(), z.number()).describe('how inputs arrived: array, b64, path, handle, binary'),
  workers: z.array(
    z.object({
      pid: z.number(),
      rss_bytes: z.number(),
      pss_bytes: z.number().optional(),
      cpu_seconds: z.number(),
      gpu_memory_bytes: z.number().optional(),
    }),
  ),
  totals: z.object({ success: z.number(), failure: z.number(), inferences: z.number() }),
  load_ms: z.number().optional(),
  warmup_ms: z.number().optional(),
  error: z.string().optional(),
});

const ShareOut = z.object({ stage: z.string(), ms: z.number(), share: z.number().describe('fraction of the total') });

function row(model: string, v: VersionSnapshot, full: boolean) {
  const w = v.window;
  const concise = {
    model,
    version: v.version,
    state: v.state,
    requests: w.requests,
    rps: w.throughput_rps,
    p50_ms: w.latency_ms.p50,
    p90_ms: w.latency_ms.p90,
    p99_ms: w.latency_ms.p99,
    error_rate: w.error_rate,
    top_errors: w.top_errors,
    avg_batch: w.batch_size_avg,
    queued: v.queued,
    memory_bytes: v.workers.reduce((sum, worker) => sum + (worker.pss_bytes ?? worker.rss_bytes), 0),
    ...(v.loaded_bytes !== undefined ? { loaded_bytes: v.loaded_bytes } : {}),
  };
  if (!full) return concise;
  return {
    ...concise,
    ...(v.device ? { device: v.device } : {}),
    instances: v.instances,
    busy: v.busy,
    restarts: v.restarts,
    rows_per_s: w.rows_per_s,
    stages_ms: w.stages_ms,
    batches: v.batches,
    pipelined: v.pipelined,
    input_forms: w.forms,
    workers: v.workers,
    totals: v.totals,
    ...(v.load_ms !== undefined ? { load_ms: v.load_ms } : {}),
    ...(v.warmup_ms !== undefined ? { warmup_ms: v.warmup_ms } : {}),
    ...(v.error ? { error: v.error } : {}),
  };
}

function mib(bytes: number): string {
  return `${Math.round(bytes / 2 ** 20)} MiB`;
}

function line(r: ReturnType<typeof row>): string {
  const errors =
    r.error_rate > 0
      ? `errors ${(r.error_rate * 100).toFixed(1)}% (${r.top_errors.map((e) => `${e.code} ${e.count}`).join(', ')})`
      : 'no errors';
  const traffic =
    r.requests === 0
      ? 'no requests'
      : r.error_rate === 1
        ? `${r.requests} req (${r.rps}/s), all failed (${r.top_errors.map((e) => `${e.code} ${e.count}`).join(', ')})`
        : `${r.requests} req (${r.rps}/s), p50 ${r.p50_ms} ms, p90 ${r.p90_ms}, p99 ${r.p99_ms}, ${errors}, batch ${r.avg_batch}`;
  return `${r.model}@${r.version} ${r.state}: ${traffic}, queued ${r.queued}, workers ${mib(r.memory_bytes)}`;
}

/** Batching, instances, device and precisions: what the advice of a diagnosis depends on. */
function modelContext(gateway: Gateway, model: string, device?: string): ModelContext {
  const config = gateway.modelConfig(model);
  const on = device ?? config.resources.device;
  const gpu = on.startsWith('cuda')
    ? gateway.gpu.snapshot?.gpus.find((g) => g.index === Number(on.split(':')[1] ?? 0))
    : undefined;
  return {
    model,
    device: on,
    ...(gpu ? { gpu_utilization: gpu.utilization } : {}),
    instances: config.resources.instances,
    ...(config.batching
      ? {
          batching: {
            max_batch_size: config.batching.max_batch_size,
            max_queue_delay_us: config.batching.max_queue_delay_us,
          },
        }
      : {}),
    precisions: config.parameters.precision,
  };
}

function diagnosisText(subject: string, d: Diagnosis): string {
  const parts = d.breakdown
    .filter((s) => s.share >= 0.01)
    .map((s) => `${s.stage} ${s.ms} ms (${Math.round(s.share * 100)}%)`)
    .join(', ');
  return [`${subject}${parts ? `: ${parts}` : ''}`, ...d.findings].join('\n');
}

export function registerMonitorTools(server: McpServer, gateway: Gateway): void {
  const register = schemaSharingRegistrar(server);

  register(
    'get_metrics',
    () => ({
      title: 'Serving metrics',
      description:
        'Health and traffic of each model version over a recent window: state, requests and throughput, P50/P90/P99 latency, error rate with the top error codes, average batch size, queue and memory. detail "full" adds stage percentiles, batch sizes, input forms, workers and totals.',
      inputSchema: z.object({
        model: z.string().optional().describe('one model (default: all)'),
        window_s: windowArg,
        detail: z.enum(['concise', 'full']).optional().describe('concise (default) or full'),
      }),
      outputSchema: z.object({
        window_s: z.number(),
        models: z.array(z.union([FullOut, ConciseOut])),
        unattributed_errors: z
          .array(z.object({ code: z.string(), count: z.number() }))
          .optional()
          .describe('failures naming no known model'),
        gpus: z
          .array(
            z.object({
              index: z.number(),
              name: z.string(),
              utilization: z.number(),
              memory_used_bytes: z.number(),
              memory_total_bytes: z.number(),
            }),
          )
          .optional(),
        jobs: z.array(JobOut).optional().describe('batch jobs running: progress, items/s, ETA'),
      }),
      annotations: { readOnlyHint: true, idempotentHint: false, openWorldHint: false },
    }),
    async ({ model, window_s, detail }, ctx) => {
      try {
        const caller = callerOf(ctx);
        if (model !== undefined) {
          gateway.access.check(caller, 'read', 'model', model);
          gateway.modelConfig(model); // MODEL_NOT_FOUND before any work
        }
        const snapshot = await serverSnapshot(gateway, (window_s ?? DEFAULT_WINDOW_S) * 1000);
        const models: ModelSnapshot[] = snapshot.models.filter(
          (m) => (model === undefined || m.name === model) && gateway.access.can(caller, 'read', 'model', m.name),
        );
        const rows = models.flatMap((m) => m.versions.map((v) => row(m.name, v, detail === 'full')));
        const lines = rows.map(line);
        if (snapshot.unattributed.failed > 0)
          lines.push(
            `failures naming no known model: ${snapshot.unattributed.top_errors.map((e) => `${e.code} ${e.count}`).join(', ')}`,
          );
        for (const g of snapshot.gpus ?? [])
          lines.push(
            `gpu ${g.index} ${g.name}: ${Math.round(g.utilization * 100)}% busy, ${mib(g.memory_used_bytes)} of ${mib(g.memory_total_bytes)}`,
          );
        const jobs = snapshot.jobs.filter(
          (j) => (model === undefined || j.model === model) && jobAllowed(gateway, caller, 'read', j),
        );
        lines.push(...jobs.map(jobLine));
        return jsonResult(`last ${snapshot.window_s} s\n${lines.join('\n') || 'No models are registered.'}`, {
          window_s: snapshot.window_s,
          models: rows,
          ...(snapshot.unattributed.failed > 0 ? { unattributed_errors: snapshot.unattributed.top_errors } : {}),
          ...(snapshot.gpus ? { gpus: snapshot.gpus } : {}),
          ...(jobs.length > 0 ? { jobs } : {}),
        });
      } catch (err) {
        return errorResult(err);
      }
    },
  );

  register(
    'explain_latency',
    () => ({
      title: 'Explain latency',
      description:
        "Where the time goes, and what to change. For a model: the mean stage breakdown (decode, queue, transfer, compute, encode; preprocess and postprocess for models that take image files) of its recent requests, the dominant stage, and advice such as 'queue dominates: raise instances' or 'decode dominates: send b64 or a path instead of JSON arrays'. For a request_id (from an infer result): that request's breakdown, compared with the model's typical request.",
      inputSchema: z.object({
        model: z.string().optional().describe('model name (give this or request_id)'),
        version: z.string().optional().describe('version (default: the model default)'),
        request_id: z.string().optional().describe('a request_id from a recent infer result'),
        window_s: windowArg,
      }),
      outputSchema: z.object({
        model: z.string(),
        version: z.string(),
        request_id: z.string().optional(),
        window_s: z.number(),
        requests: z.number().describe('successful requests analysed'),
        dominant_stage: z.string().describe('decode, queue, transfer, compute, encode, other, or none'),
        breakdown: z.array(ShareOut).describe('mean ms and share of the total per stage, largest first'),
        diagnosis: z.array(z.string()),
        recent: z
          .array(
            z.object({
              request_id: z.string(),
              ok: z.boolean(),
              code: z.string().optional(),
              total_ms: z.number(),
              stages_ms: z
                .array(z.number())
                .describe(
                  'decode, preprocess, queue, transfer, compute, postprocess, encode (0 where a stage does not apply)',
                ),
            }),
          )
          .optional()
          .describe('the newest requests'),
      }),
      annotations: { readOnlyHint: true, idempotentHint: false, openWorldHint: false },
    }),
    async ({ model, version, request_id, window_s }, ctx) => {
      try {
        const caller = callerOf(ctx);
        const windowMs = (window_s ?? DEFAULT_WINDOW_S) * 1000;
        if (request_id !== undefined) {
          const record = gateway.window.find(request_id);
          // A request of a model the caller may not read is answered as if it did not exist.
          if (!record || record.model === '' || !gateway.access.can(caller, 'read', 'model', record.model))
            throw tgError(
              'REQUEST_NOT_FOUND',
              `no recent request ${JSON.stringify(request_id)}; tensorgate keeps the last 4096 per model version. Leave request_id out to explain the model's recent requests`,
              { request_id },
            );
          const typical = gateway.window.summary(record.model, record.version, windowMs);
          const ctx = modelContext(gateway, record.model);
          const d = record.ok
            ? diagnoseRequest(record.timings, record.form, record.batch_size, ctx, typical)
            : {
                dominant: 'none' as const,
                breakdown: [],
                findings: [`The request failed with ${record.code} after ${record.timings.total_ms} ms.`],
              };
          return jsonResult(diagnosisText(`${record.model}@${record.version} request ${request_id}`, d), {
            model: record.model,
            version: record.version,
            request_id,
            window_s: typical.window_s,
            requests: 1,
            dominant_stage: d.dominant,
            breakdown: d.breakdown,
            diagnosis: d.findings,
          });
        }
        if (model === undefined) throw tgError('INVALID_REQUEST', 'explain_latency needs a model or a request_id', {});
        gateway.access.check(caller, 'read', 'model', model);
        const info = gateway.modelInfo(model);
        const v = version ?? info.default_version;
        const status = info.versions.find((x) => x.version === v);
        if (!status)
          throw tgError(
            'VERSION_NOT_FOUND',
            `model "${model}" has no version "${v}"; it has ${info.versions.map((x) => x.version).join(', ')}`,
            { model, version: v },
          );
        const summary = gateway.window.summary(model, v, windowMs);
        const d = diagnoseWindow(summary, modelContext(gateway, model, status.device));
        const recent = gateway.window.recent(model, v, windowMs, 5).map((r) => ({
          request_id: r.request_id,
          ok: r.ok,
          ...(r.code ? { code: r.code } : {}),
          total_ms: r.timings.total_ms,
          stages_ms: STAGES.filter((s) => s !== 'total').map((s) => r.timings[`${s}_ms`]),
        }));
        return jsonResult(
          diagnosisText(`${model}@${v}, ${summary.succeeded} requests in the last ${summary.window_s} s, mean`, d),
          {
            model,
            version: v,
            window_s: summary.window_s,
            requests: summary.succeeded,
            dominant_stage: d.dominant,
            breakdown: d.breakdown,
            diagnosis: d.findings,
            recent,
          },
        );
      } catch (err) {
        return errorResult(err);
      }
    },
  );
}
