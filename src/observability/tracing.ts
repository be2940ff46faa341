import { performance } from 'node:perf_hooks';
import type { Attributes, Context, SpanKind, SpanStatusCode, Tracer } from '@opentelemetry/api';
import type { Logger } from './logger.js';
import type { FailedRequest, FinishedRequest, RequestObserver } from './request-observer.js';

/**
 * OpenTelemetry spans, off unless an OTLP endpoint is configured. The OpenTelemetry packages are
 * imported only then, so a server without tracing never loads them. Each request becomes one
 * `tensorgate.infer` span with a child per stage; spans leave in batches over OTLP/HTTP (JSON) and
 * the last batch is sent on shutdown.
 */

export interface TracesEndpoint {
  /** Where spans are sent; undefined leaves it to the exporter, which reads the OTEL_* variables. */
  url: string | undefined;
  /** The URL for people (log lines). */
  shown: string;
}

/**
 * The traces endpoint from `--otlp-endpoint` (a collector's base URL; `/v1/traces` is added unless
 * the path already ends with it), else from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it is) or
 * OTEL_EXPORTER_OTLP_ENDPOINT (a base URL). Undefined when tracing is off; OTEL_SDK_DISABLED=true
 * turns off what the variables turned on.
 */
export function tracesEndpoint(
  flag: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
): TracesEndpoint | undefined {
  if (flag) {
    const url = withTracesPath(flag);
    return { url, shown: url };
  }
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return undefined;
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  if (traces) return { url: undefined, shown: traces };
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (base) return { url: undefined, shown: withTracesPath(base) };
  return undefined;
}

function withTracesPath(base: string): string {
  let url: URL;
  try {
    url = new URL(base);
  } catch {
    throw new Error(`the OTLP endpoint "${base}" is not a URL; give one such as http://127.0.0.1:4318`);
  }
  if (!url.pathname.endsWith('/v1/traces')) url.pathname = `${url.pathname.replace(/\/+$/, '')}/v1/traces`;
  return url.toString();
}

const CLOSE_TIMEOUT_MS = 5000;

export interface Tracing {
  /** Attach to the gateway with `gateway.observe()`. */
  readonly requests: RequestObserver;
  /** Sends the spans still queued (for up to 5 s) and stops the exporter. */
  close(): Promise<void>;
}

export interface TracingOptions {
  serviceVersion: string;
  /** Export failures are reported here (at warn), not thrown. */
  log?: Logger;
}

export async function startTracing(endpoint: TracesEndpoint, options: TracingOptions): Promise<Tracing> {
  const [api, sdk, otlp, resources, semconv] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/semantic-conventions'),
  ]);
  if (options.log) {
    const log = options.log;
    api.diag.setLogger(
      {
        error: (message) => log(`opentelemetry: ${message}`, { level: 'warn' }),
        warn: (message) => log(`opentelemetry: ${message}`, { level: 'warn' }),
        info: () => {},
        debug: () => {},
        verbose: () => {},
      },
      api.DiagLogLevel.WARN,
    );
  }
  const delay = Number(process.env.OTEL_BSP_SCHEDULE_DELAY);
  const provider = new sdk.TracerProvider({
    resource: resources.defaultResource().merge(
      resources.resourceFromAttributes({
        [semconv.ATTR_SERVICE_NAME]: process.env.OTEL_SERVICE_NAME?.trim() || 'tensorgate',
        [semconv.ATTR_SERVICE_VERSION]: options.serviceVersion,
      }),
    ),
    spanProcessors: [
      new sdk.BatchSpanProcessor({
        exporter: new otlp.OTLPTraceExporter(endpoint.url !== undefined ? { url: endpoint.url } : {}),
        ...(Number.isFinite(delay) && delay > 0 ? { scheduledDelayMillis: delay } : {}),
      }),
    ],
  });
  const tracer = provider.getTracer('tensorgate', options.serviceVersion);
  const spans: Spans = {
    tracer,
    root: api.ROOT_CONTEXT,
    under: (span) => api.trace.setSpan(api.ROOT_CONTEXT, span),
    server: api.SpanKind.SERVER,
    error: api.SpanStatusCode.ERROR,
    errorType: semconv.ATTR_ERROR_TYPE,
  };
  return {
    requests: new RequestTracer(spans),
    // A collector that is down must not hold up shutdown for the exporter's own timeouts.
    close: () =>
      Promise.race([
        provider.shutdown(),
        new Promise<void>((resolve) => setTimeout(resolve, CLOSE_TIMEOUT_MS).unref()),
      ]),
  };
}

/** The few pieces of the OpenTelemetry API the tracer uses, loaded with it. */
interface Spans {
  tracer: Tracer;
  root: Context;
  under: (span: ReturnType<Tracer['startSpan']>) => Context;
  server: SpanKind;
  error: SpanStatusCode;
  errorType: string;
}

/** `performance.now()` readings are offsets from `performance.timeOrigin`: epoch milliseconds. */
function epoch(t: number): number {
  return performance.timeOrigin + t;
}

/**
 * One `tensorgate.infer` span per request. Its stage children are laid end to end from the moment
 * decoding began, each as long as its stage time (the figures the response and the log carry), in
 * pipeline order: decode, queue, transfer, compute; encode starts when encoding did. Inside the
 * engine, input copies, the forward pass and output copies interleave, so there the children's
 * starts are placed to within the transfer time while their lengths are exact.
 */
class RequestTracer implements RequestObserver {
  constructor(private readonly spans: Spans) {}

  finished(r: FinishedRequest): void {
    const { tracer } = this.spans;
    const span = tracer.startSpan(
      'tensorgate.infer',
      { kind: this.spans.server, startTime: epoch(r.startedAt), attributes: attributes(r) },
      this.spans.root,
    );
    const parent = this.spans.under(span);
    const t = r.timings;
    let at = r.decodeStartedAt;
    for (const [stage, ms] of [
      ['decode', t.decode_ms],
      ['queue', t.queue_ms],
      ['transfer', t.transfer_ms],
      ['compute', t.compute_ms],
    ] as const) {
      tracer.startSpan(`tensorgate.${stage}`, { startTime: epoch(at) }, parent).end(epoch(at + ms));
      at += ms;
    }
    const encodeAt = epoch(r.encodeStartedAt);
    tracer.startSpan('tensorgate.encode', { startTime: encodeAt }, parent).end(encodeAt + t.encode_ms);
    span.end(epoch(r.endedAt));
  }

  failed(r: FailedRequest): void {
    const span = this.spans.tracer.startSpan(
      'tensorgate.infer',
      {
        kind: this.spans.server,
        startTime: epoch(r.endedAt - (r.total_ms ?? 0)),
        attributes: {
          ...attributes(r),
          'tensorgate.error_code': r.error.code,
          [this.spans.errorType]: r.error.code,
        },
      },
      this.spans.root,
    );
    span.setStatus({ code: this.spans.error, message: r.error.message });
    span.end(epoch(r.endedAt));
  }
}

function attributes(r: FinishedRequest | FailedRequest): Attributes {
  const a: Attributes = {};
  if (r.request_id !== undefined) a['tensorgate.request_id'] = r.request_id;
  if (r.model !== undefined) a['tensorgate.model'] = r.model;
  if (r.version !== undefined) a['tensorgate.model_version'] = r.version;
  if (r.adapter !== undefined) a['tensorgate.adapter'] = r.adapter;
  if ('batch_size' in r) {
    a['tensorgate.variant'] = r.variant;
    a['tensorgate.batch_size'] = r.batch_size;
    a['tensorgate.rows'] = r.rows;
  }
  return a;
}
