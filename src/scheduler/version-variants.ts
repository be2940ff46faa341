import { performance } from 'node:perf_hooks';
import type { EngineRequest, VariantReport } from '../engines/engine.js';
import { asTensorgateError, tgError } from '../errors.js';
import type { Logger } from '../observability/logger.js';
import { DEFAULT_TOLERANCE, type Precision, type TensorSpec } from '../registry/model-config.js';
import { checkOutput, describeCheck, fmt3, missingOutput, type OutputCheck, worstCheck } from '../tensor/compare.js';
import { fromNestedArray, nestFlat } from '../tensor/nested.js';
import { seededRandom } from '../tensor/seeded-random.js';
import { tensorSource } from '../tensor/source.js';
import { numel } from '../tensor/tensor.js';
import type { ModelPool } from './model-pool.js';

/**
 * The variants of one loaded model version, and which one serves a request.
 *
 * A version's primary pool runs its own engine's variants (torch: one per offered precision, built
 * and checked by the worker; onnx and remote: fp32 as it is). A PyTorch version with an ONNX
 * export (`versions.N.onnx`) also gets an onnx pool in the gateway; once both are loaded, the export
 * is run on seeded inputs beside PyTorch's fp32 and kept only within validation.tolerance.fp32.
 *
 * Choice: a request names a precision (fp32 by default) and may name an engine. fp32 goes to the
 * onnx variant when it passed its check, because it runs in the gateway with no worker round trip
 * (bench/engines measures the difference); otherwise to the primary pool. Every other precision
 * runs on torch. A variant that was rejected or cannot run here is answered VARIANT_UNAVAILABLE
 * with its reason, and the others keep serving.
 *
 * Each ready variant's latency is measured once (median of a few one-row requests through its
 * queue and engine) when the version has more than one variant: that is what describe_model shows
 * next to the accuracy. Registration and load_model measure before they answer; a server loading
 * its repository at start-up does not, since those requests would compete with the first real
 * ones for the CPU, and measures when describe_model first asks.
 */

export interface VariantRoute {
  pool: ModelPool;
  /** `engine-precision`, e.g. torch-int8 or onnx-fp32: what the result reports. */
  variant: string;
}

/** Which variant serves a precision, and why: describe_model's engine choice. */
export interface VariantChoice {
  precision: Precision;
  variant: string | null;
  why: string;
}

/** Rows given to a -1 first dimension of the check's inputs (other -1 dimensions get 3), as the worker's check. */
const CHECK_ROWS = 4;
const MEASURE_RUNS = 5;
const MEASURE_TIMEOUT_MS = 10_000;
const STILL_LOADING = 'still loading';

export function variantId(v: { engine: string; precision: string }): string {
  return `${v.engine}-${v.precision}`;
}

export class VersionVariants {
  private onnxReport: VariantReport | undefined;
  private readonly latencies = new Map<string, number>();
  private settling: Promise<void> | undefined;
  private measuring: Promise<void> | undefined;

  constructor(
    readonly primary: ModelPool,
    readonly onnx: ModelPool | undefined,
    private readonly log: Logger,
  ) {
    if (onnx)
      this.onnxReport = {
        precision: 'fp32',
        engine: 'onnx',
        method: `ONNX export, ONNX Runtime graph optimization ${onnx.spec.config.optimization.onnx_graph}`,
        state: 'unavailable',
        reason: STILL_LOADING,
      };
  }

  private get label(): string {
    return `${this.primary.spec.config.name}@${this.primary.spec.version}`;
  }

  /**
   * Once the primary pool is ready: loads and checks the onnx variant; the same promise for every
   * caller. Never rejects: a variant that fails is recorded as unavailable or rejected, with the
   * reason.
   */
  settle(): Promise<void> {
    this.settling ??= this.check();
    return this.settling;
  }

  /** Checks (settle), then measures each ready variant's latency, once; never rejects. */
  measured(): Promise<void> {
    this.measuring ??= this.settle().then(() =>
      this.reports().filter((v) => v.state === 'ready').length > 1 ? this.measure() : undefined,
    );
    return this.measuring;
  }

  private async check(): Promise<void> {
    if (this.onnx && this.onnxReport) {
      const base = this.onnxReport;
      try {
        const info = await this.onnx.start();
        const how = info.variants[0]?.method;
        this.onnxReport = await this.checkOnnx(how ? { ...base, method: `ONNX export; ${how}` } : base);
      } catch (err) {
        this.onnxReport = { ...base, reason: `the export did not load: ${asTensorgateError(err).message}` };
      }
      if (this.onnxReport.state !== 'ready')
        this.log(`${this.label}: the onnx variant does not serve: ${this.onnxReport.reason}`, {
          level: 'warn',
          model: this.primary.spec.config.name,
          version: this.primary.spec.version,
        });
    }
  }

  /** Every variant with its check and measured latency. */
  reports(): VariantReport[] {
    const own = this.primary.loadInfo?.variants ?? [];
    return [...own, ...(this.onnxReport ? [this.onnxReport] : [])].map((v) => {
      const latency = this.latencies.get(variantId(v));
      return latency === undefined ? v : { ...v, latency_ms: latency };
    });
  }

  /**
   * The pool and variant for a request's precision (and engine, when it names one). A request that
   * names the onnx engine while the export is still loading or being checked waits for it, as a
   * request for a loading model waits; others are not held up by it.
   */
  async route(precision: Precision, engine?: string): Promise<VariantRoute> {
    if (engine === 'onnx' && this.onnx && this.onnxReport?.reason === STILL_LOADING) await this.settle();
    return this.routeNow(precision, engine);
  }

  private routeNow(precision: Precision, engine?: string): VariantRoute {
    const onnxReady = this.onnx !== undefined && this.onnxReport?.state === 'ready';
    if (engine === 'onnx' && this.onnx) {
      if (precision !== 'fp32')
        throw this.unavailable(`the onnx variant runs fp32 only; ${precision} runs on torch`, { precision, engine });
      if (!onnxReady) throw this.unavailable(`the onnx variant is ${this.describe(this.onnxReport)}`, { engine });
      return { pool: this.onnx, variant: 'onnx-fp32' };
    }
    const own = this.primary.spec.config.engine;
    if (engine !== undefined && engine !== own)
      throw this.unavailable(
        `it has no ${engine} variant; its engines are ${[own, ...(this.onnx ? ['onnx'] : [])].join(', ')}`,
        { engine },
      );
    if (precision === 'fp32' && engine === undefined && onnxReady && this.onnx)
      return { pool: this.onnx, variant: 'onnx-fp32' };
    // Before the worker has reported, the request waits in the queue; the worker refuses it then.
    const report = this.primary.loadInfo?.variants.find((v) => v.precision === precision);
    if (report && report.state !== 'ready')
      throw this.unavailable(`precision ${precision} (${report.method}) is ${this.describe(report)}`, { precision });
    return { pool: this.primary, variant: variantId({ engine: own, precision }) };
  }

  /** For each offered precision, the variant that serves it by default and why. */
  choices(offered: readonly Precision[]): VariantChoice[] {
    const reports = this.reports();
    const find = (engine: string, precision: Precision) =>
      reports.find((v) => v.engine === engine && v.precision === precision);
    const own = this.primary.spec.config.engine;
    return offered.map((precision) => {
      const mine = find(own, precision);
      // The onnx variant of a PyTorch version (an onnx model's own fp32 is `mine`).
      const onnx = precision === 'fp32' && this.onnx ? find('onnx', 'fp32') : undefined;
      if (onnx?.state === 'ready')
        return {
          precision,
          variant: 'onnx-fp32',
          why:
            `the ONNX export agrees with PyTorch (${accuracy(onnx)}) ` +
            'and runs in the gateway, with no worker round trip' +
            latencyNote(onnx, mine),
        };
      if (!mine)
        return { precision, variant: variantId({ engine: own, precision }), why: 'the model is still loading' };
      if (mine.state !== 'ready') return { precision, variant: null, why: this.describe(mine) };
      const parts = [mine.method];
      if (mine.error !== undefined) parts.push(`vs fp32: ${accuracy(mine)}`);
      if (mine.build_ms !== undefined) parts.push(`built in ${Math.round(mine.build_ms)} ms`);
      if (mine.reason) parts.push(mine.reason);
      if (onnx) parts.push(`the onnx variant is ${this.describe(onnx)}`);
      return { precision, variant: variantId(mine), why: parts.join('; ') };
    });
  }

  private describe(report: VariantReport | undefined): string {
    if (!report) return 'unknown';
    return report.reason ? `${report.state}: ${report.reason}` : report.state;
  }

  private unavailable(reason: string, details: Record<string, unknown>) {
    const { name } = this.primary.spec.config;
    return tgError('VARIANT_UNAVAILABLE', `${this.label}: ${reason}`, {
      model: name,
      version: this.primary.spec.version,
      ...details,
    });
  }

  /** The onnx pool's fp32 beside the primary's on the same seeded inputs. */
  private async checkOnnx(base: VariantReport): Promise<VariantReport> {
    const onnx = this.onnx as ModelPool;
    const { config } = this.primary.spec;
    const tolerance = config.validation.tolerance.fp32 ?? DEFAULT_TOLERANCE.fp32;
    const request = checkRequest(config.inputs, CHECK_ROWS);
    const options = { timeoutMs: MEASURE_TIMEOUT_MS };
    const [expected, actual] = await Promise.all([this.primary.infer(request, options), onnx.infer(request, options)]);
    const checks = config.outputs.map((spec): OutputCheck => {
      const want = expected.outputs.find((o) => o.name === spec.name);
      const got = actual.outputs.find((o) => o.name === spec.name);
      return want && got ? checkOutput(spec, got.tensor, want.tensor, tolerance) : missingOutput(spec, tolerance);
    });
    const worst = worstCheck(checks) as OutputCheck;
    const report: VariantReport = { ...base, state: 'ready', ...reportedCheck(worst) };
    delete report.reason;
    if (!worst.within)
      return {
        ...report,
        state: 'rejected',
        reason: `it changes the answers: ${describeCheck(worst, 'PyTorch fp32')}`,
      };
    return report;
  }

  /** Median latency of one-row requests, per ready variant, through its own queue and engine. */
  private async measure(): Promise<void> {
    const { config } = this.primary.spec;
    const request = (precision: Precision) => ({ ...checkRequest(config.inputs, 1), precision });
    for (const report of this.reports()) {
      if (report.state !== 'ready') continue;
      const pool = report.engine === 'onnx' && this.onnx ? this.onnx : this.primary;
      const times: number[] = [];
      try {
        for (let i = 0; i <= MEASURE_RUNS; i++) {
          const start = performance.now();
          await pool.infer(request(report.precision), { timeoutMs: MEASURE_TIMEOUT_MS });
          if (i > 0) times.push(performance.now() - start); // the first pays any lazy set-up
        }
      } catch (err) {
        if (pool.state !== 'closed')
          this.log(`${this.label}: could not measure ${variantId(report)}: ${asTensorgateError(err).message}`, {
            level: 'warn',
          });
        continue;
      }
      times.sort((a, b) => a - b);
      this.latencies.set(variantId(report), Math.round((times[times.length >> 1] as number) * 1000) / 1000);
    }
  }
}

/** Seeded inputs of the declared specs: floats in [0, 1), integers 0 or 1, as the worker's check makes them. */
export function checkRequest(specs: readonly TensorSpec[], rows: number): EngineRequest {
  const random = seededRandom(0);
  const inputs = specs.map((spec) => {
    const shape = spec.shape.map((d, axis) => (d !== -1 ? d : axis === 0 ? rows : 3));
    const float = spec.dtype.startsWith('float') || spec.dtype === 'bfloat16';
    const values = Array.from({ length: numel(shape) }, () => (float ? random() : random() < 0.5 ? 0 : 1));
    const tensor = fromNestedArray(shape.length === 0 ? values[0] : nestFlat(values, shape), spec.dtype);
    return { name: spec.name, tensor: tensorSource(tensor) };
  });
  return { inputs, precision: 'fp32' };
}

/** The fields of a variant report that a check fills. */
export function reportedCheck(c: OutputCheck): Partial<VariantReport> {
  const finite = (n: number) => (Number.isFinite(n) ? n : undefined);
  return {
    output: c.output,
    rule: c.rule,
    error: finite(c.error),
    max_abs: finite(c.maxAbs),
    changed: c.changed,
    compared: c.compared,
    tolerance: c.tolerance,
  };
}

/** "error 2.1e-07 of its range, no top class changed (tolerance 0.0001)" */
function accuracy(v: VariantReport): string {
  const error = v.error === undefined ? '?' : fmt3(v.error);
  if (v.rule === 'exact')
    return `${v.changed ?? '?'} of ${v.compared ?? '?'} elements differ (tolerance ${v.tolerance})`;
  const changes = v.rule === 'classes' ? `, top class of ${v.changed ?? 0} of ${v.compared ?? '?'} rows changed` : '';
  return `error ${error} of its ${v.rule === 'classes' ? 'range' : 'spread'}${changes}, tolerance ${v.tolerance}`;
}

function latencyNote(onnx: VariantReport, torch: VariantReport | undefined): string {
  if (onnx.latency_ms === undefined || torch?.latency_ms === undefined) return '';
  return ` (a one-row request measured ${onnx.latency_ms} ms, on torch fp32 ${torch.latency_ms} ms)`;
}
