import type { Gateway } from '../gateway.js';
import type { LogFormat, LogLevel } from '../observability/logger.js';
import { createLogging, type Logging } from '../observability/logging.js';
import { startTracing, type Tracing, tracesEndpoint } from '../observability/tracing.js';
import { VERSION } from '../version.js';

/**
 * The logs of a CLI process, set up from the global options (--log-level, --log-format) and made
 * on first use; and, for `serve`, the request log and the spans.
 */

let options: { level?: LogLevel; format?: LogFormat } = {};
let logging: Logging | undefined;

export function configureLogging(opts: { logLevel?: LogLevel; logFormat?: LogFormat }): void {
  options = { level: opts.logLevel, format: opts.logFormat };
}

export function processLogging(): Logging {
  logging ??= createLogging(options);
  return logging;
}

/**
 * Logs every request the gateway serves and, when an OTLP endpoint is configured (`otlpEndpoint`
 * or the OTEL_* variables), exports its spans. Resolves with what writes out the last records and
 * spans, for shutdown.
 */
export async function observeRequests(gateway: Gateway, otlpEndpoint?: string): Promise<() => Promise<void>> {
  const logs = processLogging();
  gateway.observe(logs.requests);
  let tracing: Tracing | undefined;
  const endpoint = tracesEndpoint(otlpEndpoint);
  if (endpoint) {
    tracing = await startTracing(endpoint, { serviceVersion: VERSION, log: logs.log });
    gateway.observe(tracing.requests);
    logs.log(`exporting spans to ${endpoint.shown}`, { otlp_endpoint: endpoint.shown });
  }
  return async () => {
    await tracing?.close();
    await logs.close();
  };
}
