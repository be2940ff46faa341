import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { TensorgateError } from '../../../src/errors.js';
import { RateLimiter } from '../../../src/security/rate-limit.js';

/** The token buckets on a clock the test moves. */

const caller = (clientId: string, rateLimit?: number): AuthInfo => ({
  token: 't',
  clientId,
  scopes: [],
  ...(rateLimit !== undefined ? { extra: { rateLimit } } : {}),
});

function limited(fn: () => void): TensorgateError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof TensorgateError);
    assert.equal(err.code, 'RATE_LIMITED');
    return err;
  }
  assert.fail('not limited');
}

describe('RateLimiter', () => {
  it('lets a burst through, then the rate, and says when to retry', () => {
    let now = 0;
    const limiter = new RateLimiter({ defaultRps: 2, burst: 3 }, () => now);
    const a = caller('key:a');
    for (let i = 0; i < 3; i++) limiter.take(a, '10.0.0.1');
    const err = limited(() => limiter.take(a, '10.0.0.1'));
    assert.equal(err.data.retry_after_s, 1);
    assert.match(err.message, /key:a is limited to 2 requests per second \(bursts of 3\)/);
    now += 500; // one token back at 2 per second
    limiter.take(a, '10.0.0.1');
    limited(() => limiter.take(a, '10.0.0.1'));
    now += 10_000; // refills to the burst, no further
    for (let i = 0; i < 3; i++) limiter.take(a, '10.0.0.1');
    limited(() => limiter.take(a, '10.0.0.1'));
  });

  it('keeps one bucket per caller, by principal or else by address', () => {
    const limiter = new RateLimiter({ defaultRps: 1, burst: 1 }, () => 0);
    limiter.take(caller('key:a'), '10.0.0.1');
    limiter.take(caller('key:b'), '10.0.0.1');
    limiter.take(undefined, '10.0.0.1');
    limiter.take(undefined, '10.0.0.2');
    limited(() => limiter.take(caller('key:a'), '10.0.0.9'));
    limited(() => limiter.take(undefined, '10.0.0.1'));
    assert.equal(limiter.tracked, 4);
  });

  it("applies a key's own limit over the default, and none when neither is set", () => {
    const limiter = new RateLimiter({ defaultRps: 0 }, () => 0);
    for (let i = 0; i < 1000; i++) limiter.take(caller('key:free'), 'x');
    assert.equal(limiter.tracked, 0, 'unlimited callers take no memory');
    const slow = caller('key:slow', 1);
    for (let i = 0; i < 10; i++) limiter.take(slow, 'x'); // burst: at least 10
    limited(() => limiter.take(slow, 'x'));
    assert.equal(limiter.rateOf(slow), 1);
    assert.equal(limiter.rateOf(caller('key:free')), 0);
  });

  it('forgets idle callers once many are tracked', () => {
    let now = 0;
    const limiter = new RateLimiter({ defaultRps: 100, burst: 1 }, () => now);
    for (let i = 0; i < 10_000; i++) limiter.take(undefined, `10.0.${i >> 8}.${i & 255}`);
    assert.equal(limiter.tracked, 10_000);
    now += 1000;
    limiter.take(undefined, 'a new caller');
    assert.equal(limiter.tracked, 1);
  });
});
