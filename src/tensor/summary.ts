/**
 * What an agent sees of an output tensor: a small JSON object (dtype, shape, top-k classes with
 * labels, or statistics, and the values themselves when there are few) plus a one-line text.
 */
import { z } from 'zod';
import { DTYPES } from './dtype.js';
import { nestFlat } from './nested.js';
import { compactNumber, formatShort } from './number-format.js';
import { tensorStats } from './stats.js';
import { numberReader, numel, type Tensor } from './tensor.js';
import { topKRows } from './topk.js';

export type SummaryValue = number | boolean | 'NaN' | 'Infinity' | '-Infinity' | SummaryValue[];

/** Nested values; non-finite elements are the strings 'NaN', 'Infinity' and '-Infinity' (JSON has no such numbers). */
export const SummaryValueSchema: z.ZodType<SummaryValue> = z.lazy(() =>
  z.union([z.number(), z.boolean(), z.enum(['NaN', 'Infinity', '-Infinity']), z.array(SummaryValueSchema)]),
);

export const TopItemSchema = z.object({
  label: z.string(),
  index: z.number().int(),
  score: z.number().describe('the raw value of the element'),
  probability: z.number().optional().describe('softmax over the row; present when the values are logits'),
});

export const TensorStatsSchema = z.object({
  min: z.number().nullable(),
  max: z.number().nullable(),
  mean: z.number().nullable(),
  std: z.number().nullable().describe('population standard deviation'),
  nan: z.number().int().optional().describe('count of NaN elements (left out of the statistics)'),
  inf: z.number().int().optional().describe('count of infinite elements (left out of the statistics)'),
});

export const TensorSummarySchema = z.object({
  dtype: z.enum(DTYPES),
  shape: z.array(z.number().int().nonnegative()),
  numel: z.number().int().nonnegative(),
  scores: z
    .enum(['logits', 'probabilities', 'scores'])
    .optional()
    .describe('how to read the top-k scores: logits (softmax probability added), probabilities, or independent scores'),
  top: z.array(z.object({ row: z.number().int(), top: z.array(TopItemSchema) })).optional(),
  rows_omitted: z.number().int().optional().describe('rows beyond those shown in top'),
  stats: TensorStatsSchema.optional(),
  values: SummaryValueSchema.optional(),
  note: z.string().optional(),
});

export type TensorSummary = z.infer<typeof TensorSummarySchema>;

export interface SummarizeOptions {
  /** Class names for the last dimension; top-k is shown when their count matches it. */
  labels?: readonly string[];
  /** Classes per row in top-k (default 5). */
  topK?: number;
  /** Include the values when the tensor has at most this many elements (default 16). */
  maxValues?: number;
  /** Rows shown in top-k (default 8). */
  maxRows?: number;
}

function summaryValues(t: Tensor): SummaryValue {
  const read = numberReader(t);
  const flat: SummaryValue[] = new Array(numel(t.shape));
  for (let i = 0; i < flat.length; i++) {
    const x = read(i);
    if (t.dtype === 'bool') flat[i] = x !== 0;
    else if (Number.isNaN(x)) flat[i] = 'NaN';
    else if (!Number.isFinite(x)) flat[i] = x > 0 ? 'Infinity' : '-Infinity';
    else flat[i] = compactNumber(x, t.dtype);
  }
  return nestFlat(flat, t.shape) as SummaryValue;
}

export function summarizeTensor(t: Tensor, opts: SummarizeOptions = {}): TensorSummary {
  const count = numel(t.shape);
  const summary: TensorSummary = { dtype: t.dtype, shape: [...t.shape], numel: count };
  const { labels } = opts;
  const classes = t.shape.at(-1);
  if (labels !== undefined && labels.length > 0 && classes === labels.length && count > 0) {
    const k = Math.max(1, Math.min(Math.floor(opts.topK ?? 5) || 1, classes));
    const result = topKRows(t, labels, k, Math.max(1, opts.maxRows ?? 8));
    summary.scores = result.kind;
    summary.top = result.rows;
    if (result.totalRows > result.rows.length) summary.rows_omitted = result.totalRows - result.rows.length;
  } else {
    if (labels !== undefined && labels.length > 0) {
      summary.note = `${labels.length} labels but the last dimension is ${classes ?? 'absent (rank 0)'}; showing statistics`;
    }
    if (count > 0) summary.stats = tensorStats(t);
  }
  if (count <= (opts.maxValues ?? 16)) summary.values = summaryValues(t);
  return summary;
}

function describeTop(s: TensorSummary): string {
  const rows = s.top ?? [];
  const parts = rows.slice(0, 3).map(({ top }) => {
    const best = top[0];
    if (best === undefined) return 'no finite value';
    const p = best.probability ?? (s.scores === 'probabilities' ? best.score : undefined);
    return p === undefined ? `${best.label} (score=${formatShort(best.score)})` : `${best.label} (p=${formatShort(p)})`;
  });
  const more = rows.length - parts.length + (s.rows_omitted ?? 0);
  return `top-1 ${parts.join('; ')}${more > 0 ? `; ... ${more} more rows` : ''}`;
}

function describeStats(s: TensorSummary): string {
  const st = s.stats;
  if (st === undefined) return 'empty';
  const extra = `${st.nan ? `, ${st.nan} NaN` : ''}${st.inf ? `, ${st.inf} inf` : ''}`;
  if (st.min === null || st.max === null || st.mean === null || st.std === null) return `no finite values${extra}`;
  return `min ${formatShort(st.min)} max ${formatShort(st.max)} mean ${formatShort(st.mean)} std ${formatShort(st.std)}${extra}`;
}

/** One line for a human or an agent, e.g. `logits float32[1,10]: top-1 cat (p=0.41)`. */
export function describeSummary(name: string, s: TensorSummary): string {
  const head = `${name} ${s.dtype}[${s.shape.join(',')}]`;
  if (s.top !== undefined) return `${head}: ${describeTop(s)}`;
  if (s.values !== undefined) {
    const text = JSON.stringify(s.values);
    if (text.length <= 80) return `${head}: ${text}`;
  }
  return `${head}: ${describeStats(s)}`;
}
