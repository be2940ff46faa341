import { tgError } from '../errors.js';
import { type ModelConfig, PRECISIONS, type Precision } from '../registry/model-config.js';
import type { ClassificationOutputConfig } from '../registry/processing.js';

/** Request parameters, checked against what the model offers. Unknown names are errors, not ignored. */

export interface InferenceParameters {
  precision: Precision;
  top_k: number;
  /** Classification answers leave out labels scoring under this; undefined: the config's. */
  threshold: number | undefined;
  /** Undefined: the model's or the server's default. */
  timeout_ms: number | undefined;
  /** Undefined: the variant the model's engine choice picks (describe_model says which). */
  engine: Engine | undefined;
}

/** Engines a request may name, to run a precision on one engine rather than the one chosen for it. */
export const REQUEST_ENGINES = ['torch', 'onnx', 'remote'] as const;
type Engine = (typeof REQUEST_ENGINES)[number];

const KNOWN = ['precision', 'engine', 'top_k', 'threshold', 'timeout_ms'] as const;
const MAX_TIMEOUT_MS = 3_600_000;

export function parseParameters(raw: Record<string, unknown> | undefined, config: ModelConfig): InferenceParameters {
  const params = raw ?? {};
  for (const key of Object.keys(params)) {
    if (!(KNOWN as readonly string[]).includes(key)) {
      throw tgError('BAD_PARAMETER', `unknown parameter "${key}"; known parameters are ${KNOWN.join(', ')}`, {
        parameter: key,
      });
    }
  }
  const offered = new Set<Precision>(['fp32', ...config.parameters.precision]);
  const precision = params.precision ?? 'fp32';
  if (typeof precision !== 'string' || !(PRECISIONS as readonly string[]).includes(precision)) {
    throw tgError('BAD_PARAMETER', `precision must be one of ${PRECISIONS.join(', ')}`, { parameter: 'precision' });
  }
  if (!offered.has(precision as Precision)) {
    throw tgError(
      'BAD_PARAMETER',
      `model "${config.name}" does not offer precision ${precision}; it offers ${[...offered].join(', ')}`,
      { parameter: 'precision', offered: [...offered] },
    );
  }
  const engine = params.engine;
  if (engine !== undefined && !(REQUEST_ENGINES as readonly unknown[]).includes(engine))
    throw tgError('BAD_PARAMETER', `engine must be one of ${REQUEST_ENGINES.join(', ')}`, { parameter: 'engine' });
  return {
    precision: precision as Precision,
    // A classification answer lists as many labels as its config says, unless the call says.
    top_k: topK(params.top_k ?? classificationOf(config)?.top_k),
    threshold: threshold(params.threshold),
    timeout_ms: timeoutMs(params.timeout_ms),
    engine: engine as Engine | undefined,
  };
}

/** `top_k`: how many classes a summary lists (5 when absent). */
export function topK(raw: unknown): number {
  const k = raw ?? 5;
  if (typeof k !== 'number' || !Number.isInteger(k) || k < 1 || k > 100) {
    throw tgError('BAD_PARAMETER', 'top_k must be an integer from 1 to 100', { parameter: 'top_k' });
  }
  return k;
}

function threshold(raw: unknown): number | undefined {
  if (raw !== undefined && (typeof raw !== 'number' || !(raw >= 0 && raw <= 1)))
    throw tgError('BAD_PARAMETER', 'threshold must be a number from 0 to 1', { parameter: 'threshold' });
  return raw;
}

/** `timeout_ms`: undefined when absent (the model's, workflow's or server's default applies). */
export function timeoutMs(raw: unknown): number | undefined {
  if (raw !== undefined && (typeof raw !== 'number' || !Number.isInteger(raw) || raw < 1 || raw > MAX_TIMEOUT_MS)) {
    throw tgError('BAD_PARAMETER', `timeout_ms must be an integer from 1 to ${MAX_TIMEOUT_MS}`, {
      parameter: 'timeout_ms',
    });
  }
  return raw;
}

/** The model's classification output, when its processing answers labels. */
function classificationOf(config: ModelConfig): ClassificationOutputConfig | undefined {
  const output = config.processing?.output;
  return output?.type === 'classification' ? output : undefined;
}
