/** Percentiles and the per-scenario summary printed and stored by run.ts. */

/** Nearest-rank percentile (p in 0..100) of unsorted samples; NaN when there are none. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number;
}

export function median(samples: readonly number[]): number {
  return percentile(samples, 50);
}

export interface Distribution {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  min: number;
  max: number;
  mean: number;
}

export function distribution(samples: readonly number[]): Distribution {
  const mean = samples.reduce((a, b) => a + b, 0) / Math.max(1, samples.length);
  return {
    n: samples.length,
    p50: round(percentile(samples, 50)),
    p90: round(percentile(samples, 90)),
    p99: round(percentile(samples, 99)),
    // Not Math.min(...samples): a fast in-process run collects more samples than a call takes arguments.
    min: round(samples.reduce((a, b) => Math.min(a, b), Number.POSITIVE_INFINITY)),
    max: round(samples.reduce((a, b) => Math.max(a, b), Number.NEGATIVE_INFINITY)),
    mean: round(mean),
  };
}

/** Median of each numeric field over a list of records with the same keys. */
export function medianPerKey(records: readonly Record<string, number>[]): Record<string, number> {
  const out: Record<string, number> = {};
  const keys = new Set(records.flatMap((r) => Object.keys(r)));
  for (const key of keys) {
    out[key] = round(median(records.map((r) => r[key]).filter((v): v is number => typeof v === 'number')));
  }
  return out;
}

export function round(x: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
