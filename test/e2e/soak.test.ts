import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitHealthy } from '../../bench/peers/harness.js';
import { runSoak } from '../../bench/soak/soak.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * The fault soak, bounded: closed-loop clients over real HTTP while a real worker is SIGKILLed
 * every second. Every request is answered (its result, or a retryable error), none hangs, and
 * the server's memory does not grow. bench/soak/run.ts runs the full soak (100,000 requests at concurrency 64, a kill every 2 s).
 */

describe('fault soak (bounded)', { timeout: 240_000 }, () => {
  let served: Served;

  before(async () => {
    served = await serveOne('adder');
    // The URL is printed before models load; soak the model once it is ready.
    await waitHealthy(served.base, '/v2/models/adder/ready');
  });

  after(async () => {
    await served?.stop();
  });

  it('answers every request while workers are killed, and keeps its memory', async () => {
    const body = Buffer.from(
      JSON.stringify({
        inputs: [
          { name: 'a', shape: [1, 2], datatype: 'FP32', data: [1, 2] },
          { name: 'b', shape: [1, 2], datatype: 'FP32', data: [3, 4] },
        ],
      }),
    );
    const result = await runSoak({
      base: served.base,
      serverPid: served.child.pid as number,
      model: 'adder',
      body,
      expect: '"data":[4,6]',
      // Enough requests to outlast several kill intervals even on a fast host (1,500 took 0.9 s on one).
      total: 4000,
      concurrency: 32,
      killEveryMs: 1000,
      deadlineMs: 30_000,
    });
    process.stderr.write(`soak: ${JSON.stringify({ ...result, rss_mib: result.rss_mib.length })}\n`);
    assert.equal(result.requests, 4000);
    assert.equal(result.hung, 0, 'no request hangs');
    assert.deepEqual(result.other, {}, 'every failure is retryable');
    assert.ok(result.kills >= 1, 'workers were killed');
    assert.ok(result.ok > 0);
    const first = result.rss_mib[0]?.[1] as number;
    const last = result.rss_mib.at(-1)?.[1] as number;
    assert.ok(last - first < 100, `server RSS went from ${first} to ${last} MiB`);
    assert.equal((await fetch(`${served.base}/v2/health/ready`)).status, 200);
  });
});
