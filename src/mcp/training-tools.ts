import { type CallToolResult, type McpServer, ResourceTemplate } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { asTensorgateError } from '../errors.js';
import type { AccessControl } from '../security/rbac.js';
import type { MetricSummary } from '../training/metric-series.js';
import type { ChangeAnswer, TrainingControl } from '../training/training-control.js';
import { schemaSharingRegistrar } from './output-schemas.js';
import { actorOf, callerOf, errorResult, jsonResult } from './results.js';

/**
 * Tools that let an agent watch and steer training runs (tensorgate.train in the training loop).
 * Answers stay compact: a one-line summary per run, summaries and downsampled curves on request.
 */

const runArg = z.string().describe('run id, from list_runs');

const ChangeOut = z.object({
  run: z.string(),
  status: z.enum(['queued', 'pending', 'applied']),
  version: z.number().nullable().describe('control version the change went out in (null while queued)'),
  requested_step: z.number(),
  apply_at_step: z.number().nullable(),
  values: z.record(z.string(), z.object({ old: z.unknown(), new: z.unknown() })).optional(),
  command: z.string().optional(),
  checkpoint: z.boolean().optional(),
  note: z.string(),
});

function fmt(value: unknown): string {
  if (typeof value !== 'number') return String(value);
  if (value === 0 || !Number.isFinite(value)) return String(value);
  const abs = Math.abs(value);
  return abs >= 1e4 || abs < 1e-3 ? value.toExponential(3) : String(Number(value.toPrecision(4)));
}

function metricLine(name: string, m: MetricSummary): string {
  const min = m.min ? `, min ${fmt(m.min.value)} @${m.min.step}` : '';
  return `${name} ${fmt(m.last.value)} @${m.last.step} (${m.trend}${min})`;
}

function changeResult(answer: ChangeAnswer): CallToolResult {
  const what = answer.values
    ? Object.entries(answer.values)
        .map(([k, v]) => `${k} ${fmt(v.old)} -> ${fmt(v.new)}`)
        .join(', ')
    : `${answer.command}${answer.checkpoint ? ' with checkpoint' : ''}`;
  return jsonResult(`${answer.run}: ${what}; ${answer.note}`, { ...answer });
}

export function registerTrainingTools(server: McpServer, training: TrainingControl, access: AccessControl): void {
  const register = schemaSharingRegistrar(server);
  register(
    'list_runs',
    () => ({
      title: 'List training runs',
      description:
        'Lists the training runs attached with tensorgate.train on this machine: id, state (starting, running, paused, stopped, finished, exited), step and the last value of each metric.',
      inputSchema: z.object({}),
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    }),
    async (_args, ctx) => {
      try {
        const caller = callerOf(ctx);
        const listed = training.listRuns();
        const runs = listed.runs.filter((r) => access.can(caller, 'read', 'run', r.id));
        // Unreadable files name no run anyone may read; only callers who may read every run see them.
        const unreadable = access.can(caller, 'read', 'run', '*') ? listed.unreadable : [];
        const lines = runs.map(
          (r) =>
            `${r.id}: ${r.state} at step ${r.step}${Object.entries(r.latest)
              .map(([k, v]) => `, ${k} ${fmt(v)}`)
              .join('')}`,
        );
        for (const u of unreadable) lines.push(`${u.file}: unreadable (${u.error})`);
        return jsonResult(lines.join('\n') || `No training runs in ${training.runsDir}.`, { runs, unreadable });
      } catch (err) {
        return errorResult(err);
      }
    },
  );
  register(
    'get_run',
    () => ({
      title: 'Inspect a training run',
      description:
        "Shows a run's hyperparameters (declared spec, current value, pending changes with the step they apply at), metric summaries (last, min, max, recent mean, trend), each metric's curve downsampled to `points` points, recent changes and the last checkpoint. `plot: true` adds a PNG of the curves.",
      inputSchema: z.object({
        run: runArg,
        metrics: z.array(z.string()).optional().describe('only these metrics (default: all)'),
        points: z.number().int().min(0).max(1000).optional().describe('points per curve (default 50; 0: none)'),
        since_step: z.number().int().optional().describe('curves from this step on'),
        plot: z.boolean().optional().describe('add a PNG plot of the curves'),
      }),
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    }),
    async ({ run, metrics, points, since_step, plot }, ctx) => {
      try {
        access.check(callerOf(ctx), 'read', 'run', run);
        const report = training.getRun(run, {
          ...(metrics ? { metrics } : {}),
          ...(points !== undefined ? { points } : {}),
          ...(since_step !== undefined ? { sinceStep: since_step } : {}),
        });
        const hp = report.hyperparameters
          .map((h) => {
            const pending = h.pending ? ` (-> ${fmt(h.pending.value)} ${h.pending.status})` : '';
            return `${h.name}=${fmt(h.current)}${pending}`;
          })
          .join(', ');
        const lines = [
          `${report.id}: ${report.state} at step ${report.step}; ${hp || 'no hyperparameters'}`,
          ...Object.entries(report.metrics).map(([name, m]) => metricLine(name, m)),
        ];
        const content: CallToolResult['content'] = [{ type: 'text', text: lines.join('\n') }];
        if (plot)
          content.push({ type: 'image', data: training.plot(run, metrics).toString('base64'), mimeType: 'image/png' });
        return { content, structuredContent: report as unknown as Record<string, unknown> };
      } catch (err) {
        return errorResult(err);
      }
    },
  );
  register(
    'set_hyperparameters',
    () => ({
      title: 'Change hyperparameters of a run',
      description:
        "Changes hyperparameters of a running training run, checked against the run's declared types and ranges. Answers at once with the pending change; the trainer applies it between optimizer steps, at apply_at_step (default: the next step) or the first step after, and get_run then shows the step it was applied at.",
      outputSchema: ChangeOut,
      inputSchema: z.object({
        run: runArg,
        values: z
          .record(z.string(), z.unknown())
          .describe('new values by name, e.g. {"lr": 0.01}; numbers for float/int, true/false for bool'),
        apply_at_step: z.number().int().min(0).optional().describe('apply at this step, no earlier'),
        reason: z.string().max(500).optional().describe('why, for the audit log'),
      }),
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
    }),
    async ({ run, values, apply_at_step, reason }, ctx) => {
      try {
        access.check(callerOf(ctx), 'write', 'run', run);
      } catch (err) {
        return errorResult(err);
      }
      try {
        return changeResult(
          training.setHyperparameters(run, values, {
            actor: actorOf(server, ctx),
            ...(apply_at_step !== undefined ? { applyAtStep: apply_at_step } : {}),
            ...(reason ? { reason } : {}),
          }),
        );
      } catch (err) {
        return errorResult(err);
      }
    },
  );
  register(
    'control_run',
    () => ({
      title: 'Pause, resume, checkpoint or stop a run',
      description:
        'pause: the trainer waits at its next step boundary until resume. checkpoint: it calls its on_checkpoint callback at the next step boundary. stop: it checkpoints (when it has a callback, unless checkpoint: false) and ends its loop.',
      outputSchema: ChangeOut,
      inputSchema: z.object({
        run: runArg,
        command: z.enum(['pause', 'resume', 'checkpoint', 'stop']),
        checkpoint: z
          .boolean()
          .optional()
          .describe('for stop: checkpoint first (default: when the run has a callback)'),
        reason: z.string().max(500).optional().describe('why, for the audit log'),
      }),
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    }),
    async ({ run, command, checkpoint, reason }, ctx) => {
      try {
        access.check(callerOf(ctx), 'write', 'run', run);
      } catch (err) {
        return errorResult(err);
      }
      try {
        return changeResult(
          training.control(run, command, {
            actor: actorOf(server, ctx),
            ...(checkpoint !== undefined ? { checkpoint } : {}),
            ...(reason ? { reason } : {}),
          }),
        );
      } catch (err) {
        return errorResult(err);
      }
    },
  );

  server.registerResource(
    'run-metrics',
    new ResourceTemplate('run://{id}/metrics', {
      list: async (ctx) => ({
        resources: training
          .listRuns()
          .runs.filter((r) => access.can(callerOf(ctx), 'read', 'run', r.id))
          .map((r) => ({
            uri: `run://${r.id}/metrics`,
            name: `${r.id} metrics`,
            mimeType: 'text/csv',
            description: `${r.name}: ${r.state} at step ${r.step}`,
          })),
      }),
    }),
    {
      title: 'Run metrics',
      description: "A training run's metrics as CSV: a row per step, a column per metric.",
      mimeType: 'text/csv',
    },
    async (uri, variables, ctx) => {
      try {
        access.check(callerOf(ctx), 'read', 'run', String(variables.id));
        return { contents: [{ uri: uri.href, mimeType: 'text/csv', text: training.metricsCsv(String(variables.id)) }] };
      } catch (err) {
        const error = asTensorgateError(err);
        throw new Error(`${error.code}: ${error.message}`);
      }
    },
  );
}
