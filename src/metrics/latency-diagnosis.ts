import type { InputForm } from '../requests/decode-inputs.js';
import { type ReportedStageTimes, round, STAGES, type Stage, type WindowSummary } from './request-window.js';

/**
 * Turns stage times into an answer to "where do my milliseconds go, and what do I change?": the
 * share of each stage, the one that dominates, and advice that follows from it and from the
 * model's configuration. Pure functions over numbers, so each rule is tested on its own.
 */

/** The measured stages plus `other`: time inside the request not in any stage (validation, lookup). */
export type BreakdownStage = Exclude<Stage, 'total'> | 'other';

export interface StageShare {
  stage: BreakdownStage;
  ms: number;
  /** Fraction of the total, 0-1. */
  share: number;
}

/** What the advice depends on besides the numbers. */
export interface ModelContext {
  model: string;
  device: string;
  instances: number;
  /** Undefined when dynamic batching is off. */
  batching?: { max_batch_size: number; max_queue_delay_us: number };
  precisions: string[];
  /** Busy share (0-1) of the model's GPU as nvidia-smi last sampled it; unknown elsewhere. */
  gpu_utilization?: number;
}

/** A GPU busy at least this share of the time is the limit; below the second, it mostly waits. */
const GPU_SATURATED = 0.85;
const GPU_WAITING = 0.5;

export interface Diagnosis {
  dominant: BreakdownStage | 'none';
  breakdown: StageShare[];
  /** Plain-language findings, the main one first. */
  findings: string[];
}

const PARTS = STAGES.filter((s): s is Exclude<Stage, 'total'> => s !== 'total');
/** A stage above this share of the total is called dominant. */
const DOMINANT_SHARE = 0.4;

/** Shares of each stage in `t`, largest first. */
export function breakdown(t: ReportedStageTimes): StageShare[] {
  const total = Math.max(t.total_ms, 1e-9);
  // The processing stages only where they happened: other models' breakdowns stay as they were.
  const parts = PARTS.map((stage) => ({ stage, ms: t[`${stage}_ms`] ?? 0 })).filter(
    (p) => p.ms > 0 || (p.stage !== 'preprocess' && p.stage !== 'postprocess'),
  );
  const other = Math.max(0, t.total_ms - parts.reduce((sum, p) => sum + p.ms, 0));
  return [...parts, { stage: 'other' as const, ms: other }]
    .map(({ stage, ms }) => ({ stage, ms: round(ms), share: round(ms / total) }))
    .sort((a, b) => b.share - a.share);
}

function pct(share: number): string {
  return `${Math.round(share * 100)}%`;
}

function ms(x: number): string {
  return `${x >= 10 ? Math.round(x) : Number(x.toPrecision(2))} ms`;
}

/** The advice for a dominant stage. `forms` counts how the inputs arrived. */
function advice(
  top: StageShare,
  ctx: ModelContext,
  forms: Partial<Record<InputForm, number>>,
  batchAvg: number,
): string {
  const head = `${top.stage} dominates (${pct(top.share)} of the total, ${ms(top.ms)})`;
  switch (top.stage) {
    case 'queue': {
      const b = ctx.batching;
      if (!b)
        return `${head}: requests wait for one of ${ctx.instances} busy instance(s). Raise resources.instances, or turn on dynamic batching ("batching": {"max_batch_size": 16, "max_queue_delay_us": 500}) so waiting requests share a forward pass.`;
      const delay = b.max_queue_delay_us / 1000;
      if (delay > 0 && top.ms <= delay * 1.5 && batchAvg < b.max_batch_size / 2)
        return `${head}: mostly the batching delay (up to ${ms(delay)}) with little to batch (average batch ${batchAvg}). Lower batching.max_queue_delay_us when traffic is light.`;
      return `${head}: requests wait for one of ${ctx.instances} busy instance(s) with batches averaging ${batchAvg} of at most ${b.max_batch_size}. Raise resources.instances${batchAvg >= b.max_batch_size * 0.8 ? ' or batching.max_batch_size' : ''}.`;
    }
    case 'decode': {
      const arrays = forms.array ?? 0;
      const all = Object.values(forms).reduce((a, b) => a + b, 0);
      if (arrays > 0 && arrays >= all / 2)
        return `${head}: inputs sent as JSON arrays (${arrays} of ${all} requests), parsed number by number. Send {"b64", "shape"}, a file path or a tensor:// handle over MCP, or binary tensors or shared memory over OIP v2.`;
      return `${head}: the input bytes themselves are large. Pass a tensor:// handle from an earlier output, or use OIP v2 shared memory, so they are not decoded and copied per request.`;
    }
    case 'transfer':
      return `${head}: moving tensors to and from the worker costs more than the forward pass. Batching spreads the round trip over more rows. For a model called back to back, resources.spin_us keeps the worker and the gateway awake between its calls instead of waking each other per call (the CUDA default is 1000; answers slower than the spin are waited for asleep), at the price of busy cores. If the server log says "input arenas use fs writes", build the mmap addon (npm run build:native) to save a copy.`;
    case 'compute': {
      const gpu = gpuFinding(head, ctx, batchAvg);
      if (gpu) return gpu;
      const lower = ctx.precisions.filter((p) => p !== 'fp32');
      const options = [
        lower.length > 0 ? `a lower precision (parameters.precision: ${lower.join(' or ')})` : undefined,
        ctx.device === 'cpu' ? 'a GPU (resources.device)' : undefined,
        ctx.batching ? undefined : 'dynamic batching for throughput',
      ].filter(Boolean);
      return `${head}: the model's forward pass on ${ctx.device} is the cost; the serving path adds little.${options.length > 0 ? ` To go faster: ${options.join(', ')}.` : ''}`;
    }
    case 'preprocess':
      return `${head}: decoding and resizing the images in the worker. Send images nearer the model's input size (a 4000x3000 PNG decodes ~100x slower than a 400x300 one; large JPEGs are decoded at a reduced scale unless jpeg_draft is off), prefer JPEG to PNG for photos, or raise resources.threads (a batch's images are decoded on the worker's threads) or resources.instances.`;
    case 'postprocess':
      return `${head}: turning outputs into labels. Ask for fewer labels (top_k), or report it: it should be tiny.`;
    case 'encode':
      return `${head}: encoding large outputs. Ask only for the outputs you need, and read them by tensor:// handle (MCP) or as binary (OIP v2) instead of JSON.`;
    case 'other':
      return `${head}: time outside the measured stages (request validation, model lookup). Report it if it persists: it should be tiny.`;
  }
}

/**
 * Compute on a GPU whose utilisation is known: either the device is the limit (busy nearly all
 * the time: tensorgate cannot make it faster, only a faster forward pass or more GPUs can), or it
 * waits between forward passes (requests do not keep it busy: fill it with batches or instances).
 */
function gpuFinding(head: string, ctx: ModelContext, batchAvg: number): string | undefined {
  const busy = ctx.gpu_utilization;
  if (busy === undefined || !ctx.device.startsWith('cuda')) return undefined;
  const lower = ctx.precisions.filter((p) => p !== 'fp32');
  if (busy >= GPU_SATURATED) {
    const options = [
      lower.length > 0 ? `a lower precision (parameters.precision: ${lower.join(' or ')})` : undefined,
      'a compiled variant (optimization.torch: compile or aoti)',
      'instances on another GPU',
    ].filter(Boolean);
    return `${head}: the GPU (${ctx.device}) is busy ${pct(busy)} of the time, so the device, not the serving path, is the limit. To go faster: ${options.join(', ')}.`;
  }
  if (busy < GPU_WAITING) {
    const b = ctx.batching;
    const fill = b
      ? `batches average ${batchAvg} of at most ${b.max_batch_size} rows: more concurrent requests, or a longer batching.max_queue_delay_us, fill them`
      : 'dynamic batching ("batching": {"max_batch_size": 32, "max_queue_delay_us": 1000}) lets concurrent requests share a forward pass';
    return `${head}, yet the GPU (${ctx.device}) is busy only ${pct(busy)} of the time: it waits between forward passes. ${fill[0]?.toUpperCase()}${fill.slice(1)}; a second instance (resources.instances) overlaps one request's transfers with another's compute.`;
  }
  return undefined;
}

/** Diagnoses the mean stage times of a model's recent requests. */
export function diagnoseWindow(summary: WindowSummary, ctx: ModelContext): Diagnosis {
  if (summary.succeeded === 0) {
    const findings = [
      `No successful requests to ${ctx.model} in the last ${summary.window_s} s: nothing to break down.`,
    ];
    if (summary.failed > 0) findings.push(errorFinding(summary));
    return { dominant: 'none', breakdown: [], findings };
  }
  const s = summary.stages_ms;
  const means = Object.fromEntries(STAGES.map((stage) => [`${stage}_ms`, s[stage].mean])) as ReportedStageTimes;
  const shares = breakdown(means);
  const findings = [];
  const top = shares[0] as StageShare;
  const dominant = top.share >= DOMINANT_SHARE ? top.stage : 'none';
  if (dominant === 'none') {
    findings.push(
      `No single stage dominates: ${shares
        .slice(0, 3)
        .map((x) => `${x.stage} ${pct(x.share)}`)
        .join(', ')} of a mean ${ms(means.total_ms)}.`,
    );
  } else findings.push(advice(top, ctx, summary.forms, summary.batch_size_avg));
  const tail = tailFinding(summary);
  if (tail) findings.push(tail);
  if (summary.failed > 0) findings.push(errorFinding(summary));
  return { dominant, breakdown: shares, findings };
}

/** Diagnoses one request, compared with the model's recent typical request when there is one. */
export function diagnoseRequest(
  t: ReportedStageTimes,
  form: InputForm | undefined,
  batchSize: number,
  ctx: ModelContext,
  typical?: WindowSummary,
): Diagnosis {
  const shares = breakdown(t);
  const top = shares[0] as StageShare;
  const dominant = top.share >= DOMINANT_SHARE ? top.stage : 'none';
  const findings = [
    dominant === 'none'
      ? `No single stage dominates this request: ${shares
          .slice(0, 3)
          .map((x) => `${x.stage} ${pct(x.share)}`)
          .join(', ')} of ${ms(t.total_ms)}.`
      : advice(top, ctx, form ? { [form]: 1 } : {}, batchSize),
  ];
  if (typical && typical.succeeded > 1 && top.stage !== 'other') {
    const usual = typical.stages_ms[top.stage].p50;
    if (top.ms > usual * 2 && top.ms - usual > 0.5)
      findings.push(
        `Its ${top.stage} (${ms(top.ms)}) is ${Math.round(top.ms / Math.max(usual, 1e-3))}x the model's recent P50 for that stage (${ms(usual)}): an outlier, not the norm.`,
      );
    else findings.push(`Typical for ${ctx.model}: recent P50 ${ms(typical.latency_ms.p50)} end to end.`);
  }
  return { dominant, breakdown: shares, findings };
}

/** When P99 is far above P50, the stage whose P99 grows most is the tail's cause. */
function tailFinding(summary: WindowSummary): string | undefined {
  const { p50, p99 } = summary.latency_ms;
  if (summary.succeeded < 20 || p99 < p50 * 3 || p99 - p50 < 1) return undefined;
  let worst: Exclude<Stage, 'total'> = 'compute';
  let gap = -1;
  for (const stage of PARTS) {
    const g = summary.stages_ms[stage].p99 - summary.stages_ms[stage].p50;
    if (g > gap) {
      gap = g;
      worst = stage;
    }
  }
  return `P99 (${ms(p99)}) is ${Math.round(p99 / Math.max(p50, 1e-3))}x P50 (${ms(p50)}); the tail comes mostly from ${worst} (P99 ${ms(summary.stages_ms[worst].p99)} vs P50 ${ms(summary.stages_ms[worst].p50)}).`;
}

function errorFinding(summary: WindowSummary): string {
  const codes = summary.top_errors.map((e) => `${e.code} ${e.count}`).join(', ');
  return `${pct(summary.error_rate)} of requests failed (${codes}); failures are not in the breakdown.`;
}
