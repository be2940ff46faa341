import { performance } from 'node:perf_hooks';
import type { EngineRequest } from '../engines/engine.js';
import { type TensorgateError, tgError } from '../errors.js';
import type { PooledResponse } from './model-pool.js';

/**
 * One request in a model's queue, answered exactly once: with its result, its error, TIMEOUT when
 * its deadline passes, or CANCELLED when its caller aborts. A job that times out or is cancelled
 * while queued is withdrawn at once (so its input bytes are freed); one that is already running
 * is answered at once and its result, when it comes, is dropped.
 */
export class Job {
  readonly enqueuedAt = performance.now();
  /** Run alone: set when a batch it was in failed, so that only the bad request fails again. */
  solo = false;
  /** Already re-run once after its worker crashed. */
  retried = false;
  /** A batch job's request: queued behind every other kind (see ModelPool.infer). */
  background = false;
  private done = false;
  private timer: NodeJS.Timeout | undefined;
  private signal: AbortSignal | undefined;
  private onAbort: (() => void) | undefined;

  constructor(
    readonly request: EngineRequest,
    /** Rows along dimension 0, or undefined when the request cannot join a batch. */
    readonly rows: number | undefined,
    readonly key: string,
    private readonly resolve: (r: PooledResponse) => void,
    private readonly reject: (e: TensorgateError) => void,
  ) {}

  get settled(): boolean {
    return this.done;
  }

  /** Starts the deadline and listens for cancellation; `withdraw` takes the job out of its queue. */
  arm(timeoutMs: number, signal: AbortSignal | undefined, withdraw: () => void): void {
    if (signal?.aborted) {
      this.fail(cancelled());
      return;
    }
    this.timer = setTimeout(() => {
      withdraw();
      this.fail(
        tgError('TIMEOUT', `no answer within ${timeoutMs} ms; raise parameters.timeout_ms or retry later`, {
          timeoutMs,
        }),
      );
    }, timeoutMs);
    if (signal) {
      this.signal = signal;
      this.onAbort = () => {
        withdraw();
        this.fail(cancelled());
      };
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  succeed(response: PooledResponse): void {
    if (this.finish()) this.resolve(response);
  }

  fail(error: TensorgateError): void {
    if (this.finish()) this.reject(error);
  }

  private finish(): boolean {
    if (this.done) return false;
    this.done = true;
    clearTimeout(this.timer);
    if (this.signal && this.onAbort) this.signal.removeEventListener('abort', this.onAbort);
    return true;
  }
}

function cancelled(): TensorgateError {
  return tgError('CANCELLED', 'the caller cancelled the request');
}
