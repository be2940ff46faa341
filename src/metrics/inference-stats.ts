/**
 * Per model version request counters and cumulative stage times, kept in the gateway for every
 * adapter: what the OIP v2 statistics extension reports (Triton's field names and meanings).
 */

export interface Duration {
  count: number;
  ns: number;
}

export interface VersionStats {
  /** Inferences (rows: the requests' batch dimensions) and requests. */
  inference_count: number;
  last_inference: number;
  success: Duration;
  fail: Duration;
  queue: Duration;
  compute_input: Duration;
  compute_infer: Duration;
  compute_output: Duration;
}

export interface SuccessTimings {
  totalMs: number;
  queueMs: number;
  /** Moving input bytes to where the model reads them (decode into shared memory, IPC). */
  inputMs: number;
  computeMs: number;
  /** Getting the outputs back and encoding them. */
  outputMs: number;
  rows: number;
}

const NS = 1e6;

function empty(): VersionStats {
  const d = () => ({ count: 0, ns: 0 });
  return {
    inference_count: 0,
    last_inference: 0,
    success: d(),
    fail: d(),
    queue: d(),
    compute_input: d(),
    compute_infer: d(),
    compute_output: d(),
  };
}

function add(d: Duration, ms: number): void {
  d.count++;
  d.ns += Math.round(ms * NS);
}

export class InferenceStats {
  private readonly byVersion = new Map<string, VersionStats>();

  private entry(model: string, version: string): VersionStats {
    const key = `${model}\0${version}`;
    let stats = this.byVersion.get(key);
    if (!stats) {
      stats = empty();
      this.byVersion.set(key, stats);
    }
    return stats;
  }

  success(model: string, version: string, t: SuccessTimings): void {
    const s = this.entry(model, version);
    s.inference_count += t.rows;
    s.last_inference = Date.now();
    add(s.success, t.totalMs);
    add(s.queue, t.queueMs);
    add(s.compute_input, t.inputMs);
    add(s.compute_infer, t.computeMs);
    add(s.compute_output, t.outputMs);
  }

  failure(model: string, version: string, totalMs: number): void {
    const s = this.entry(model, version);
    s.last_inference = Date.now();
    add(s.fail, totalMs);
  }

  get(model: string, version: string): VersionStats {
    return this.byVersion.get(`${model}\0${version}`) ?? empty();
  }
}
