import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitHealthy } from '../../bench/peers/harness.js';
import { runSoak } from '../../bench/soak/soak.js';
import { type Served, serveOne } from '../helpers/serve.js';

/**
 * The fault soak, bounded: closed-loop clients over real HTTP while one of the model's two real
 * workers is SIGKILLed every second. Every request is answered (its result, or a retryable
 * error) before its deadline, none hangs, the server's memory does not grow, and the model serves
 * again once the kills stop. A restart takes about 2 s here (torch 2.x imports in 1.2 s), longer
 * than the interval, so kills come only while the model serves: one worker may be killed while the
 * other restarts, but the model is never kept from serving. bench/soak/run.ts runs the full soak
 * (100,000 requests at concurrency 64, a kill every 2 s). Bounded here at 8,000 requests or 60 s.
 */

describe('fault soak (bounded)', { timeout: 240_000 }, () => {
  let served: Served;

  before(async () => {
    served = await serveOne('adder', {
      editConfig: (config) => {
        config.resources = { ...(config.resources as object), instances: 2 };
      },
    });
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
        // Waiting for a restart ends in the server's own TIMEOUT well before the client's deadline.
        parameters: { timeout_ms: 10_000 },
      }),
    );
    const result = await runSoak({
      base: served.base,
      serverPid: served.child.pid as number,
      model: 'adder',
      body,
      expect: '"data":[4,6]',
      // Enough requests to outlast several kill intervals even on a fast host (4,000 took 4 to 5 s here, 3 to 5 kills).
      total: 8000,
      // On a loaded machine restarts slow down and so do the requests waiting for them: the time
      // bound keeps the test within its timeout, and every request sent must still be answered.
      maxDurationMs: 60_000,
      concurrency: 32,
      killEveryMs: 1000,
      onlyServing: true,
      deadlineMs: 30_000,
    });
    process.stderr.write(`soak: ${JSON.stringify({ ...result, rss_mib: result.rss_mib.length })}\n`);
    assert.equal(result.requests, result.sent, 'every request sent is counted');
    assert.ok(result.sent >= 1000, `only ${result.sent} requests were sent`);
    assert.equal(result.hung, 0, 'no request hangs');
    assert.deepEqual(result.other, {}, 'every failure is retryable');
    assert.ok(result.kills >= 1, 'workers were killed');
    assert.ok(result.ok > 0);
    // Growth past the first second is what a leak would show; the first second is the heap
    // growing to its working size (Node 24's V8 takes more of it before collecting).
    const warm = result.rss_mib.find(([t]) => t >= 1)?.[1] ?? (result.rss_mib[0]?.[1] as number);
    const last = result.rss_mib.at(-1)?.[1] as number;
    assert.ok(last - warm < 100, `server RSS went from ${warm} (after 1 s) to ${last} MiB`);
    assert.equal((await fetch(`${served.base}/v2/health/ready`)).status, 200);
    // The kills have stopped: the model serves again, on restarted workers.
    await waitHealthy(served.base, '/v2/models/adder/ready');
    const after = await fetch(`${served.base}/v2/models/adder/infer`, { method: 'POST', body });
    assert.equal(after.status, 200, await after.text());
  });
});
