import type { IncomingMessage, ServerResponse } from 'node:http';
import type FindMyWay from 'find-my-way';
import type { HTTPVersion } from 'find-my-way';
import type { Gateway } from '../gateway.js';
import { serverSnapshot } from '../metrics/snapshot.js';

/**
 * The live view: GET /dashboard/api/snapshot (one ServerSnapshot as JSON, what `tensorgate top`
 * polls) and GET /dashboard/api/events (Server-Sent Events: a snapshot at once, then one a
 * second). Snapshots are only built while someone is watching.
 */

const DEFAULT_WINDOW_S = 60;
const MAX_WINDOW_S = 3600;
const TICK_MS = 1000;

type Router = FindMyWay.Instance<HTTPVersion.V1>;

/** `?window=S` (seconds, 1-3600), else 60. */
function windowMs(req: IncomingMessage): number {
  const raw = new URL(req.url ?? '/', 'http://localhost').searchParams.get('window');
  const s = raw === null ? DEFAULT_WINDOW_S : Number(raw);
  return (Number.isFinite(s) && s >= 1 ? Math.min(s, MAX_WINDOW_S) : DEFAULT_WINDOW_S) * 1000;
}

/** Registers the dashboard routes; the returned function ends every open event stream. */
export function registerDashboardRoutes(router: Router, gateway: Gateway): () => void {
  const streams = new Set<ServerResponse>();

  router.on('GET', '/dashboard/api/snapshot', (req, res) => {
    const body = JSON.stringify(serverSnapshot(gateway, windowMs(req)));
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(body);
  });

  router.on('GET', '/dashboard/api/events', (req, res) => {
    const window = windowMs(req);
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-store',
      connection: 'keep-alive',
    });
    const send = () => res.write(`event: snapshot\ndata: ${JSON.stringify(serverSnapshot(gateway, window))}\n\n`);
    send();
    const timer = setInterval(send, TICK_MS);
    streams.add(res);
    const stop = () => {
      clearInterval(timer);
      streams.delete(res);
    };
    req.once('close', stop);
    res.once('close', stop);
  });

  return () => {
    for (const res of streams) res.end();
    streams.clear();
  };
}
