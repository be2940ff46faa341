import { dtypeSize } from './dtype.js';
import { numberReader, type Tensor } from './tensor.js';

/**
 * Whether a variant changes what a user sees: one rule per kind of output, applied to each output
 * of a variant against plain fp32 on the same inputs. The worker's variants are judged by the same
 * rules in Python (python/tensorgate/_accuracy.py); test/fixtures/accuracy-cases.json holds cases
 * both must judge alike.
 *
 * - `classes`: a floating output whose config names labels (logits, probabilities). Each row of
 *   the last dimension is one answer; its error is max |variant - fp32| over the row divided by
 *   the row's range in fp32, and its answer has *changed* when the variant's top class scores, in
 *   fp32, more than tolerance x range below fp32's top class (two near-tied classes may swap).
 *   Within: no changed row and every row's error at most the tolerance.
 * - `values`: any other floating output: max |variant - fp32| over the output's spread (max - min
 *   of fp32; its largest magnitude when constant). Within: at most the tolerance.
 * - `exact`: integer and bool outputs: the share of elements that differ, at most the tolerance.
 *
 * A NaN or infinity where fp32 has something else is an infinite error.
 */

export type AccuracyRule = 'classes' | 'values' | 'exact';

export interface OutputCheck {
  output: string;
  rule: AccuracyRule;
  /** Scaled error (classes, values) or share of differing elements (exact). */
  error: number;
  maxAbs: number;
  /** Rows whose answer changed (classes) or elements that differ (exact); 0 for values. */
  changed: number;
  /** Rows (classes) or elements (values, exact) compared. */
  compared: number;
  tolerance: number;
  within: boolean;
}

export interface OutputKind {
  name: string;
  dtype: string;
  labels?: readonly string[] | undefined;
}

export function ruleFor(spec: OutputKind): AccuracyRule {
  if (!spec.dtype.startsWith('float') && spec.dtype !== 'bfloat16') return 'exact';
  return spec.labels && spec.labels.length > 0 ? 'classes' : 'values';
}

export function checkOutput(spec: OutputKind, actual: Tensor, expected: Tensor, tolerance: number): OutputCheck {
  const rule = ruleFor(spec);
  const n = expected.data.byteLength / dtypeSize(expected.dtype);
  const result = (error: number, maxAbs: number, changed: number, compared: number): OutputCheck => ({
    output: spec.name,
    rule,
    error,
    maxAbs,
    changed,
    compared,
    tolerance,
    within: error <= tolerance && (rule !== 'classes' || changed === 0),
  });
  if (actual.shape.join() !== expected.shape.join() || actual.data.byteLength !== expected.data.byteLength)
    return result(Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, n, n);
  const a = numberReader(actual);
  const e = numberReader(expected);
  if (rule === 'exact') {
    let differ = 0;
    let maxAbs = 0;
    for (let i = 0; i < n; i++)
      if (a(i) !== e(i)) {
        differ++;
        maxAbs = Math.max(maxAbs, Math.abs(a(i) - e(i)));
      }
    return result(n ? differ / n : 0, maxAbs, differ, n);
  }
  // Differences where fp32 is finite; a non-finite variant value where fp32 differs is fatal.
  let maxAbs = 0;
  for (let i = 0; i < n; i++) {
    const x = a(i);
    const y = e(i);
    if (!Number.isFinite(x) && !Object.is(x, y) && !(Number.isNaN(x) && Number.isNaN(y)))
      return result(Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 0, n);
    if (Number.isFinite(y)) maxAbs = Math.max(maxAbs, Math.abs(x - y));
  }
  if (rule === 'values') {
    let lo = Number.POSITIVE_INFINITY;
    let hi = Number.NEGATIVE_INFINITY;
    let magnitude = 0;
    for (let i = 0; i < n; i++) {
      const y = e(i);
      if (!Number.isFinite(y)) continue;
      lo = Math.min(lo, y);
      hi = Math.max(hi, y);
      magnitude = Math.max(magnitude, Math.abs(y));
    }
    const spread = hi > lo ? hi - lo : magnitude;
    return result(spread > 0 ? maxAbs / spread : maxAbs, maxAbs, 0, n);
  }
  const classes = expected.shape.length ? (expected.shape[expected.shape.length - 1] as number) : 1;
  const rows = classes > 0 ? n / classes : 0;
  const finite = (i: number, read: (i: number) => number) => (Number.isFinite(e(i)) ? read(i) : 0);
  let error = 0;
  let changed = 0;
  for (let r = 0; r < rows; r++) {
    const base = r * classes;
    let lo = Number.POSITIVE_INFINITY;
    let hi = Number.NEGATIVE_INFINITY;
    let magnitude = 0;
    let rowAbs = 0;
    let pick = base;
    for (let i = base; i < base + classes; i++) {
      const y = finite(i, e);
      lo = Math.min(lo, y);
      hi = Math.max(hi, y);
      magnitude = Math.max(magnitude, Math.abs(y));
      if (Number.isFinite(e(i))) rowAbs = Math.max(rowAbs, Math.abs(a(i) - e(i)));
      if (finite(i, a) > finite(pick, a)) pick = i;
    }
    const span = hi > lo ? hi - lo : Math.max(magnitude, Number.MIN_VALUE);
    error = Math.max(error, rowAbs / span);
    if (hi - finite(pick, e) > tolerance * span) changed++;
  }
  return result(error, maxAbs, changed, rows);
}

/** An output one side did not return: an infinite error. */
export function missingOutput(spec: OutputKind, tolerance: number): OutputCheck {
  const inf = Number.POSITIVE_INFINITY;
  return {
    output: spec.name,
    rule: ruleFor(spec),
    error: inf,
    maxAbs: inf,
    changed: 0,
    compared: 0,
    tolerance,
    within: false,
  };
}

/** The output furthest past (or closest to) its tolerance; a changed answer counts as furthest. */
export function worstCheck(checks: readonly OutputCheck[]): OutputCheck | undefined {
  const severity = (c: OutputCheck) =>
    c.rule === 'classes' && c.changed > 0
      ? Number.POSITIVE_INFINITY
      : c.tolerance > 0
        ? c.error / c.tolerance
        : c.error > 0
          ? Number.POSITIVE_INFINITY
          : 0;
  return checks.reduce<OutputCheck | undefined>(
    (w, c) => (w === undefined || severity(c) > severity(w) ? c : w),
    undefined,
  );
}

/** What a check found, in the words the worker uses for the same rules. */
export function describeCheck(c: OutputCheck, against = 'fp32'): string {
  if (c.rule === 'exact')
    return `output "${c.output}": ${c.changed} of ${c.compared} elements differ from ${against} (share ${fmt3(c.error)}, tolerance ${c.tolerance})`;
  let text = `output "${c.output}" is off from ${against} by up to ${fmt3(c.maxAbs)}, ${fmt3(c.error)} of its ${c.rule === 'classes' ? 'range' : 'spread'} (tolerance ${c.tolerance})`;
  if (c.changed) text += `; the top class of ${c.changed} of ${c.compared} rows changed`;
  return text;
}

/** One line per output of an export's check: "logits: error 2.1e-07 of its range, max |onnx - torch| 4.8e-07, top class changed in 0 of 3 rows (tolerance 0.0001)" */
export function checkLine(e: OutputCheck, against: string): string {
  if (e.rule === 'exact')
    return `${e.output}: ${e.changed} of ${e.compared} elements differ (tolerance ${e.tolerance})`;
  const what = e.rule === 'classes' ? 'range' : 'spread';
  const rows = e.rule === 'classes' ? `, top class changed in ${e.changed} of ${e.compared} rows` : '';
  return `${e.output}: error ${fmt3(e.error)} of its ${what}, max |${against} - torch| ${fmt3(e.maxAbs)}${rows} (tolerance ${e.tolerance})`;
}

/** Three significant digits, as Python's `:.3g` writes them. */
export function fmt3(n: number): string {
  if (!Number.isFinite(n)) return Number.isNaN(n) ? 'nan' : n > 0 ? 'inf' : '-inf';
  if (n === 0) return '0';
  const exponent = Math.floor(Math.log10(Math.abs(n)));
  if (exponent < -4 || exponent >= 3) {
    const [mantissa, exp] = n.toExponential(2).split('e') as [string, string];
    const trimmed = mantissa.replace(/\.?0+$/, '');
    const e = Number(exp);
    return `${trimmed}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
  }
  return String(Number(n.toPrecision(3)));
}
