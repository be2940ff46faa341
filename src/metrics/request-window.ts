import type { InputForm } from '../requests/decode-inputs.js';

/**
 * The most recent requests of each model version, kept in fixed-size rings of typed arrays: what
 * `get_metrics`, `explain_latency`, the dashboard and `tensorgate top` read their percentiles,
 * rates and stage breakdowns from. Prometheus histograms answer the same questions over any range
 * but only at bucket resolution and only to a scraper; these answer exactly, in process, for the
 * last minutes. Recording is a handful of array stores (no allocation); summaries sort on read.
 */

/** In the order a request goes through them; preprocess and postprocess are 0 without processing. */
export const STAGES = [
  'decode',
  'preprocess',
  'queue',
  'transfer',
  'compute',
  'postprocess',
  'encode',
  'total',
] as const;
export type Stage = (typeof STAGES)[number];
export type StageTimes = Record<`${Stage}_ms`, number>;
/** What a request reports: the processing stages only when its model has processing. */
export type ReportedStageTimes = Omit<StageTimes, 'preprocess_ms' | 'postprocess_ms'> &
  Partial<Pick<StageTimes, 'preprocess_ms' | 'postprocess_ms'>>;
const TOTAL = STAGES.indexOf('total');

const FORMS: readonly InputForm[] = ['array', 'b64', 'path', 'handle', 'binary', 'text'];
/** Requests kept per model version: minutes of traffic at moderate rates, ~200 KB each. */
export const DEFAULT_CAPACITY = 4096;

export interface RequestRecord {
  request_id: string;
  model: string;
  version: string;
  /** Epoch milliseconds when the answer was ready. */
  at: number;
  ok: boolean;
  /** The error code of a failed request. */
  code?: string;
  /** Stage times; a failed request has only `total_ms` (the rest are 0). */
  timings: StageTimes;
  batch_size: number;
  rows: number;
  /** How the inputs arrived (the first input's form). */
  form?: InputForm;
}

export interface Percentiles {
  p50: number;
  p90: number;
  p99: number;
  mean: number;
}

export interface WindowSummary {
  /** Seconds the figures cover: the window asked for, or less when the server is younger. */
  window_s: number;
  requests: number;
  succeeded: number;
  failed: number;
  throughput_rps: number;
  /** Rows inferred per second (a request of N rows counts N). */
  rows_per_s: number;
  error_rate: number;
  top_errors: { code: string; count: number }[];
  /** End-to-end time of successful requests. */
  latency_ms: Percentiles;
  stages_ms: Record<Stage, Percentiles>;
  batch_size_avg: number;
  forms: Partial<Record<InputForm, number>>;
}

class Ring {
  private head = 0;
  size = 0;
  readonly at: Float64Array;
  readonly stages: Float64Array[];
  readonly batch: Uint32Array;
  readonly rows: Uint32Array;
  /** 0 failed, 1 succeeded. */
  readonly ok: Uint8Array;
  /** Index into FORMS plus one; 0 when unknown. */
  readonly form: Uint8Array;
  readonly ids: (string | undefined)[];
  readonly codes: (string | undefined)[];

  constructor(readonly capacity: number) {
    this.at = new Float64Array(capacity);
    this.stages = STAGES.map(() => new Float64Array(capacity));
    this.batch = new Uint32Array(capacity);
    this.rows = new Uint32Array(capacity);
    this.ok = new Uint8Array(capacity);
    this.form = new Uint8Array(capacity);
    this.ids = new Array(capacity);
    this.codes = new Array(capacity);
  }

  /** Claims the next slot (overwriting the oldest) and returns its index. */
  next(): number {
    const i = this.head;
    this.head = (i + 1) % this.capacity;
    if (this.size < this.capacity) this.size++;
    return i;
  }

  /** Slot indexes from newest to oldest, stopping at the first older than `since`. */
  *newest(since: number): Generator<number> {
    for (let n = 0; n < this.size; n++) {
      const i = (this.head - 1 - n + this.capacity) % this.capacity;
      if ((this.at[i] as number) < since) return;
      yield i;
    }
  }
}

export class RequestWindow {
  private readonly rings = new Map<string, Ring>();
  private readonly started = Date.now();

  constructor(private readonly capacity = DEFAULT_CAPACITY) {}

  private ring(model: string, version: string): Ring {
    const key = `${model}\0${version}`;
    let ring = this.rings.get(key);
    if (!ring) {
      ring = new Ring(this.capacity);
      this.rings.set(key, ring);
    }
    return ring;
  }

  recordSuccess(
    model: string,
    version: string,
    requestId: string,
    t: ReportedStageTimes,
    batchSize: number,
    rows: number,
    form: InputForm | undefined,
  ): void {
    const ring = this.ring(model, version);
    const i = ring.next();
    ring.at[i] = Date.now();
    STAGES.forEach((stage, s) => {
      (ring.stages[s] as Float64Array)[i] = t[`${stage}_ms`] ?? 0;
    });
    ring.batch[i] = batchSize;
    ring.rows[i] = rows;
    ring.ok[i] = 1;
    ring.form[i] = form === undefined ? 0 : FORMS.indexOf(form) + 1;
    ring.ids[i] = requestId;
    ring.codes[i] = undefined;
  }

  /** A failed request; one whose model is unknown is kept under model "" so it still counts. */
  recordFailure(
    model: string | undefined,
    version: string | undefined,
    requestId: string,
    totalMs: number,
    code: string,
  ) {
    const ring = this.ring(model ?? '', version ?? '');
    const i = ring.next();
    ring.at[i] = Date.now();
    for (const stage of ring.stages) stage[i] = 0;
    (ring.stages[TOTAL] as Float64Array)[i] = totalMs;
    ring.batch[i] = 0;
    ring.rows[i] = 0;
    ring.ok[i] = 0;
    ring.form[i] = 0;
    ring.ids[i] = requestId;
    ring.codes[i] = code;
  }

  /** Model versions with at least one request recorded (the unknown-model ring as model ""). */
  keys(): { model: string; version: string }[] {
    return [...this.rings.keys()].map((k) => {
      const [model = '', version = ''] = k.split('\0');
      return { model, version };
    });
  }

  /** Seconds a window of `windowMs` really covers: less while the server is younger than it. */
  coveredSeconds(windowMs: number, now = Date.now()): number {
    return Math.max(1e-3, Math.min(windowMs, now - this.started)) / 1000;
  }

  /** Percentiles, rates and error codes of one version over the last `windowMs`. */
  summary(model: string, version: string, windowMs: number, now = Date.now()): WindowSummary {
    const windowS = this.coveredSeconds(windowMs, now);
    const ring = this.rings.get(`${model}\0${version}`);
    const indexes = ring ? [...ring.newest(now - windowMs)] : [];
    const okIdx = ring ? indexes.filter((i) => ring.ok[i] === 1) : [];
    const failed = indexes.length - okIdx.length;
    const codes = new Map<string, number>();
    const forms: Partial<Record<InputForm, number>> = {};
    let rows = 0;
    let batch = 0;
    if (ring) {
      for (const i of indexes) {
        const code = ring.codes[i];
        if (code !== undefined) codes.set(code, (codes.get(code) ?? 0) + 1);
      }
      for (const i of okIdx) {
        rows += ring.rows[i] as number;
        batch += ring.batch[i] as number;
        const form = FORMS[(ring.form[i] as number) - 1];
        if (form) forms[form] = (forms[form] ?? 0) + 1;
      }
    }
    const stages = Object.fromEntries(
      STAGES.map((stage, s) => [stage, percentiles(ring ? okIdx.map((i) => ring.stages[s]?.[i] as number) : [])]),
    ) as Record<Stage, Percentiles>;
    return {
      window_s: round(windowS),
      requests: indexes.length,
      succeeded: okIdx.length,
      failed,
      throughput_rps: round(indexes.length / windowS),
      rows_per_s: round(rows / windowS),
      error_rate: indexes.length === 0 ? 0 : round(failed / indexes.length),
      top_errors: [...codes]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 5)
        .map(([code, count]) => ({ code, count })),
      latency_ms: stages.total,
      stages_ms: stages,
      batch_size_avg: okIdx.length === 0 ? 0 : round(batch / okIdx.length),
      forms,
    };
  }

  /** The newest requests of one version (successes and failures), newest first. */
  recent(model: string, version: string, windowMs: number, limit: number, now = Date.now()): RequestRecord[] {
    const ring = this.rings.get(`${model}\0${version}`);
    if (!ring) return [];
    const out: RequestRecord[] = [];
    for (const i of ring.newest(now - windowMs)) {
      if (out.length >= limit) break;
      out.push(this.record(ring, i, model, version));
    }
    return out;
  }

  /** One request by id, while it is still in its ring. */
  find(requestId: string): RequestRecord | undefined {
    for (const [key, ring] of this.rings) {
      const i = ring.ids.lastIndexOf(requestId);
      if (i < 0 || i >= ring.size) continue;
      const [model = '', version = ''] = key.split('\0');
      return this.record(ring, i, model, version);
    }
    return undefined;
  }

  private record(ring: Ring, i: number, model: string, version: string): RequestRecord {
    const stage = (s: number) => ring.stages[s]?.[i] as number;
    const form = FORMS[(ring.form[i] as number) - 1];
    const code = ring.codes[i];
    return {
      request_id: ring.ids[i] as string,
      model,
      version,
      at: ring.at[i] as number,
      ok: ring.ok[i] === 1,
      ...(code !== undefined ? { code } : {}),
      timings: Object.fromEntries(STAGES.map((name, s) => [`${name}_ms`, stage(s)])) as StageTimes,
      batch_size: ring.batch[i] as number,
      rows: ring.rows[i] as number,
      ...(form ? { form } : {}),
    };
  }
}

/** Nearest-rank percentiles (what a reader expects from "P99 of these 200 requests"). */
export function percentiles(values: number[]): Percentiles {
  if (values.length === 0) return { p50: 0, p90: 0, p99: 0, mean: 0 };
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) =>
    sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  return { p50: round(at(0.5)), p90: round(at(0.9)), p99: round(at(0.99)), mean: round(mean) };
}

/** Rounds to microsecond resolution for millisecond figures (three decimals). */
export function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}
