import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { describe, it } from 'node:test';
import { DashboardSessions, sessionCookie } from '../../../src/http/dashboard-sessions.js';

const request = (cookie?: string) => ({ headers: cookie === undefined ? {} : { cookie } }) as IncomingMessage;

describe('DashboardSessions', () => {
  it('finds the credential by the cookie among others, and forgets it on close', () => {
    const sessions = new DashboardSessions(() => 0);
    const { id } = sessions.open('tgk_a');
    assert.match(id, /^[\w-]{43}$/);
    assert.equal(sessions.tokenOf(request(`theme=dark; tg_session=${id}; other=1`)), 'tgk_a');
    assert.equal(sessions.tokenOf(request('tg_session=not-a-session')), undefined);
    assert.equal(sessions.tokenOf(request()), undefined);
    sessions.close(request(`tg_session=${id}`));
    assert.equal(sessions.tokenOf(request(`tg_session=${id}`)), undefined);
  });

  it('ends a session after 8 hours, or when its credential expires if sooner', () => {
    let now = 1_000_000;
    const sessions = new DashboardSessions(() => now);
    const long = sessions.open('key');
    assert.equal(long.maxAgeS, 8 * 3600);
    const short = sessions.open('jwt', now / 1000 + 60);
    assert.equal(short.maxAgeS, 60);
    now += 61_000;
    assert.equal(sessions.tokenOf(request(`tg_session=${short.id}`)), undefined);
    assert.equal(sessions.tokenOf(request(`tg_session=${long.id}`)), 'key');
    now += 8 * 3600 * 1000;
    assert.equal(sessions.tokenOf(request(`tg_session=${long.id}`)), undefined);
    assert.equal(sessions.size, 0);
  });

  it('keeps at most 1000 sessions, dropping the oldest', () => {
    const sessions = new DashboardSessions(() => 0);
    const first = sessions.open('t0');
    for (let i = 1; i <= 1000; i++) sessions.open(`t${i}`);
    assert.equal(sessions.size, 1000);
    assert.equal(sessions.tokenOf(request(`tg_session=${first.id}`)), undefined);
  });

  it('sets a cookie scripts cannot read and other sites never send', () => {
    assert.equal(
      sessionCookie('abc', 60, true),
      'tg_session=abc; Path=/dashboard; HttpOnly; SameSite=Strict; Max-Age=60; Secure',
    );
    assert.doesNotMatch(sessionCookie('abc', 60, false), /Secure/);
  });
});
