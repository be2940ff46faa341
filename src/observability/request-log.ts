import type { Logger as PinoLogger } from 'pino';
import type { FailedRequest, FinishedRequest, RequestObserver } from './request-observer.js';

/**
 * One log record per inference request: `inference` at info when it finished, `inference failed`
 * at warn when it did not. With the level above that, a request costs one level check and no
 * record is built. The gateway tells its observers after the answer has gone out (AfterAnswers),
 * so building and writing a record is not part of any request's latency.
 */
export class RequestLog implements RequestObserver {
  constructor(private readonly logger: PinoLogger) {}

  finished(r: FinishedRequest): void {
    if (this.logger.isLevelEnabled('info')) this.writeFinished(r);
  }

  failed(r: FailedRequest): void {
    if (this.logger.isLevelEnabled('warn')) this.writeFailed(r);
  }

  private writeFinished(r: FinishedRequest): void {
    const t = r.timings;
    this.logger.info(
      {
        request_id: r.request_id,
        model: r.model,
        version: r.version,
        adapter: r.adapter,
        variant: r.variant,
        batch_size: r.batch_size,
        rows: r.rows,
        decode_ms: t.decode_ms,
        queue_ms: t.queue_ms,
        transfer_ms: t.transfer_ms,
        compute_ms: t.compute_ms,
        encode_ms: t.encode_ms,
        total_ms: t.total_ms,
      },
      'inference',
    );
  }

  private writeFailed(r: FailedRequest): void {
    this.logger.warn(
      {
        request_id: r.request_id,
        model: r.model,
        version: r.version,
        adapter: r.adapter,
        code: r.error.code,
        error: r.error.message,
        total_ms: r.total_ms,
      },
      'inference failed',
    );
  }
}
