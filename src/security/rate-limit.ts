import type { AuthInfo } from '@modelcontextprotocol/server';
import { tgError } from '../errors.js';

/**
 * Request rate limits per caller: a token bucket each, refilled at the caller's rate and holding
 * up to `burst` tokens, so a client may send a short burst (an MCP session opens with several
 * requests at once) but not more than the rate for long. The caller is the authenticated
 * principal (`key:<id>`, `jwt:<sub>`); without auth, the remote address. An API key's own
 * `rate_limit` overrides the server's default. Checked before any work is done for the request.
 */

export interface RateLimitOptions {
  /** Requests per second for each caller without a limit of its own; 0 for none. */
  defaultRps: number;
  /** Bucket size in requests (default: the rate, at least 10). */
  burst?: number;
}

interface Bucket {
  tokens: number;
  refilledAt: number;
  rps: number;
}

/** Buckets kept before full (idle) ones are dropped: bounds memory against many distinct callers. */
const SWEEP_AT = 10_000;

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly options: RateLimitOptions,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The limit that applies to a caller: its key's own, else the default (0: unlimited). */
  rateOf(auth: AuthInfo | undefined): number {
    const own = auth?.extra?.rateLimit;
    return typeof own === 'number' && own > 0 ? own : this.options.defaultRps;
  }

  /** Takes one request's token for the caller, or throws RATE_LIMITED with when to retry. */
  take(auth: AuthInfo | undefined, remote: string): void {
    const rps = this.rateOf(auth);
    if (rps <= 0) return;
    const who = auth?.clientId ?? `remote:${remote}`;
    const capacity = this.options.burst ?? Math.max(10, rps);
    const now = this.now();
    let bucket = this.buckets.get(who);
    if (!bucket || bucket.rps !== rps) {
      if (this.buckets.size >= SWEEP_AT) this.sweep(now);
      bucket = { tokens: capacity, refilledAt: now, rps };
      this.buckets.set(who, bucket);
    }
    bucket.tokens = Math.min(capacity, bucket.tokens + ((now - bucket.refilledAt) / 1000) * rps);
    bucket.refilledAt = now;
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return;
    }
    const retryAfterS = Math.max(1, Math.ceil((1 - bucket.tokens) / rps));
    throw tgError(
      'RATE_LIMITED',
      `${who} is limited to ${rps} requests per second (bursts of ${capacity}); retry after ${retryAfterS} s`,
      { retry_after_s: retryAfterS, rps },
    );
  }

  /** Drops buckets that have refilled completely: their callers are idle and start full anyway. */
  private sweep(now: number): void {
    for (const [who, b] of this.buckets) {
      const capacity = this.options.burst ?? Math.max(10, b.rps);
      if (b.tokens + ((now - b.refilledAt) / 1000) * b.rps >= capacity) this.buckets.delete(who);
    }
  }

  /** Callers with a bucket now (for tests and the sweep). */
  get tracked(): number {
    return this.buckets.size;
  }
}
