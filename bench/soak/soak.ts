import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { workerPids } from '../../test/helpers/processes.js';

/**
 * The fault soak: closed-loop OIP v2 clients send a fixed number of requests while a worker of
 * the server is killed (SIGKILL) at a fixed interval. Every request must be answered, with its
 * result or with a retryable error, within a deadline (a request past it counts as hung). The
 * server's RSS is sampled throughout. Shared by bench/soak/run.ts and its bounded test.
 */

export interface SoakOptions {
  /** http://HOST:PORT of the server. */
  base: string;
  serverPid: number;
  model: string;
  body: Buffer;
  /** Text every successful answer must contain (its output data): a 200 without it is WRONG_RESULT. */
  expect: string;
  total: number;
  /** Sends no new request after this long (those in flight are still answered); none: no bound. */
  maxDurationMs?: number;
  concurrency: number;
  killEveryMs: number;
  /**
   * Kill only while the model is ready (its OIP ready route answers 200): only workers that serve,
   * never one still restarting. Without it a kill may land on a restart, as a real fault may; with
   * one instance and restarts slower than the kill interval the model then never serves again.
   */
  onlyServing?: boolean;
  /** A request not answered within this is counted as hung (and abandoned). */
  deadlineMs: number;
}

/** Codes a client may retry: the request was not run, or its worker died under it. */
export const RETRYABLE = new Set(['WORKER_CRASHED', 'MODEL_NOT_READY', 'QUEUE_FULL', 'TIMEOUT', 'SHUTTING_DOWN']);

export interface SoakResult {
  /** Requests sent; each one is counted below as answered (ok, retryable, other) or hung. */
  sent: number;
  requests: number;
  ok: number;
  retryable: Record<string, number>;
  /** Answered with a code that is not retryable: a failure of the soak. */
  other: Record<string, number>;
  hung: number;
  kills: number;
  duration_s: number;
  /** [seconds since start, server RSS in MiB] once a second. */
  rss_mib: [number, number][];
}

function rssMib(pid: number): number {
  const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  return Math.round((kb / 1024) * 10) / 10;
}

/** POSTs one infer; resolves with 'ok', an error code, or 'hung' past the deadline. */
function inferOnce(opts: SoakOptions, agent: Agent): Promise<string> {
  return new Promise((resolve) => {
    const req = request(
      `${opts.base}/v2/models/${opts.model}/infer`,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': opts.body.length } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          clearTimeout(timer);
          const text = Buffer.concat(chunks).toString();
          if (res.statusCode === 200) return resolve(text.includes(opts.expect) ? 'ok' : 'WRONG_RESULT');
          resolve(/"error":"([A-Z_]+):/.exec(text)?.[1] ?? `HTTP ${res.statusCode}`);
        });
      },
    );
    const timer = setTimeout(() => {
      req.destroy();
      resolve('hung');
    }, opts.deadlineMs);
    req.on('error', (err) => {
      clearTimeout(timer);
      resolve(`socket: ${err.message}`);
    });
    req.end(opts.body);
  });
}

export async function runSoak(opts: SoakOptions): Promise<SoakResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: opts.concurrency });
  const started = performance.now();
  const outcomes = new Map<string, number>();
  let sent = 0;
  let kills = 0;
  const rss: [number, number][] = [[0, rssMib(opts.serverPid)]];
  const sampler = setInterval(() => {
    rss.push([Math.round((performance.now() - started) / 100) / 10, rssMib(opts.serverPid)]);
  }, 1000);
  const ready = () =>
    fetch(`${opts.base}/v2/models/${opts.model}/ready`, { signal: AbortSignal.timeout(1000) })
      .then((r) => r.status === 200)
      .catch(() => false);
  const killer = setInterval(async () => {
    if (opts.onlyServing && !(await ready())) return;
    const workers = workerPids(opts.serverPid);
    const victim = workers[Math.floor(Math.random() * workers.length)];
    if (victim === undefined) return;
    try {
      process.kill(victim, 'SIGKILL');
      kills++;
    } catch {
      // Already gone.
    }
  }, opts.killEveryMs);
  const stopAt = started + (opts.maxDurationMs ?? Number.POSITIVE_INFINITY);
  const loop = async () => {
    while (sent < opts.total && performance.now() < stopAt) {
      sent++;
      const outcome = await inferOnce(opts, agent);
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    }
  };
  try {
    await Promise.all(Array.from({ length: opts.concurrency }, loop));
  } finally {
    clearInterval(sampler);
    clearInterval(killer);
    agent.destroy();
  }
  rss.push([Math.round((performance.now() - started) / 100) / 10, rssMib(opts.serverPid)]);
  const retryable: Record<string, number> = {};
  const other: Record<string, number> = {};
  for (const [outcome, count] of outcomes) {
    if (outcome === 'ok' || outcome === 'hung') continue;
    (RETRYABLE.has(outcome) ? retryable : other)[outcome] = count;
  }
  return {
    sent,
    requests: [...outcomes.values()].reduce((a, b) => a + b, 0),
    ok: outcomes.get('ok') ?? 0,
    retryable,
    other,
    hung: outcomes.get('hung') ?? 0,
    kills,
    duration_s: Math.round((performance.now() - started) / 100) / 10,
    rss_mib: rss,
  };
}
