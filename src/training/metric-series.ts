/**
 * One metric of one run, as the gateway keeps it: every point up to a bound, then halved by
 * averaging neighbours, so a run of millions of steps costs a bounded amount of memory while
 * the shape of the curve survives. Summary statistics are kept exactly over all points seen.
 */

const DEFAULT_MAX_POINTS = 100_000;
const RECENT = 100;

export interface MetricPoint {
  step: number;
  value: number;
}

export interface MetricSummary {
  count: number;
  last: MetricPoint & { time: number };
  min: MetricPoint | null;
  max: MetricPoint | null;
  /** Mean of the last 100 finite points. */
  recent_mean: number | null;
  /** Direction of the last 100 points (least-squares slope against step, relative to their spread). */
  trend: 'falling' | 'flat' | 'rising' | 'unknown';
  non_finite: number;
}

export class MetricSeries {
  private steps: number[] = [];
  private values: number[] = [];
  private count = 0;
  private nonFinite = 0;
  private lastTime = 0;
  private min: MetricPoint | null = null;
  private max: MetricPoint | null = null;

  constructor(private readonly maxPoints = DEFAULT_MAX_POINTS) {}

  push(step: number, value: number, time: number): void {
    this.count++;
    this.lastTime = time;
    if (!Number.isFinite(value)) this.nonFinite++;
    else {
      if (!this.min || value < this.min.value) this.min = { step, value };
      if (!this.max || value > this.max.value) this.max = { step, value };
    }
    this.steps.push(step);
    this.values.push(value);
    if (this.steps.length > this.maxPoints) this.halve();
  }

  get length(): number {
    return this.steps.length;
  }

  /** Pairs of neighbours become their mean (a non-finite value wins, so a NaN stays visible). */
  private halve(): void {
    const steps: number[] = [];
    const values: number[] = [];
    for (let i = 0; i + 1 < this.steps.length; i += 2) {
      steps.push(this.steps[i + 1] as number);
      values.push(((this.values[i] as number) + (this.values[i + 1] as number)) / 2);
    }
    if (this.steps.length % 2 === 1) {
      steps.push(this.steps.at(-1) as number);
      values.push(this.values.at(-1) as number);
    }
    this.steps = steps;
    this.values = values;
  }

  summary(): MetricSummary {
    const n = this.steps.length;
    const last = { step: this.steps[n - 1] ?? -1, value: this.values[n - 1] ?? Number.NaN, time: this.lastTime };
    const xs: number[] = [];
    const ys: number[] = [];
    for (let i = Math.max(0, n - RECENT); i < n; i++) {
      const v = this.values[i] as number;
      if (Number.isFinite(v)) {
        xs.push(this.steps[i] as number);
        ys.push(v);
      }
    }
    const mean = ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : null;
    return {
      count: this.count,
      last,
      min: this.min,
      max: this.max,
      recent_mean: mean,
      trend: trendOf(xs, ys),
      non_finite: this.nonFinite,
    };
  }

  /** At most `points` points: the mean of equal runs of neighbours, the last point kept exact. */
  downsample(points: number, fromStep = Number.NEGATIVE_INFINITY): MetricPoint[] {
    let start = 0;
    while (start < this.steps.length && (this.steps[start] as number) < fromStep) start++;
    const n = this.steps.length - start;
    if (n <= 0 || points <= 0) return [];
    if (n <= points) return this.slice(start, this.steps.length);
    const out: MetricPoint[] = [];
    const per = n / points;
    for (let b = 0; b < points; b++) {
      const lo = start + Math.floor(b * per);
      const hi = b === points - 1 ? this.steps.length : start + Math.floor((b + 1) * per);
      let sum = 0;
      for (let i = lo; i < hi; i++) sum += this.values[i] as number;
      out.push({ step: this.steps[hi - 1] as number, value: sum / (hi - lo) });
    }
    return out;
  }

  private slice(from: number, to: number): MetricPoint[] {
    const out: MetricPoint[] = [];
    for (let i = from; i < to; i++) out.push({ step: this.steps[i] as number, value: this.values[i] as number });
    return out;
  }

  /** Every kept point (for CSV export and plots). */
  points(): { steps: readonly number[]; values: readonly number[] } {
    return { steps: this.steps, values: this.values };
  }
}

function trendOf(xs: number[], ys: number[]): MetricSummary['trend'] {
  const n = xs.length;
  if (n < 5) return 'unknown';
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    const dx = (xs[i] as number) - mx;
    const dy = (ys[i] as number) - my;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx === 0 || syy === 0) return 'flat';
  // The change the fitted line makes across the window, against the values' own spread.
  const change = (sxy / sxx) * ((xs[n - 1] as number) - (xs[0] as number));
  const spread = Math.sqrt(syy / n);
  if (Math.abs(change) < 0.5 * spread) return 'flat';
  return change < 0 ? 'falling' : 'rising';
}
