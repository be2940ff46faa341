import type { ServerSnapshot } from '../metrics/snapshot.js';
import { authHeaders } from './remote.js';
import { renderTop } from './top-view.js';

/**
 * `tensorgate top`: the dashboard's figures in a terminal. It polls a running server's
 * GET /dashboard/api/snapshot and redraws in the alternate screen until q or Ctrl-C, leaving the
 * terminal as it found it. `--once` prints one plain frame, `--json` the snapshot itself; with
 * stdout not a terminal, frames are printed one after another without escape codes.
 */

export interface TopOptions {
  /** The server: http://host:port, or its MCP endpoint http://host:port/mcp. */
  url: string;
  /** Seconds of recent requests the rates and percentiles cover. */
  window: number;
  /** Seconds between two snapshots. */
  interval: number;
  once?: boolean;
  json?: boolean;
}

const ALT_SCREEN_ON = '\x1b[?1049h\x1b[?25l';
const ALT_SCREEN_OFF = '\x1b[?25h\x1b[?1049l';
const HOME = '\x1b[H';
const CLEAR_TO_EOL = '\x1b[K';
const CLEAR_BELOW = '\x1b[J';
/** Width of a frame printed to a pipe or file, where there is no terminal to ask. */
const PLAIN_WIDTH = 160;

export class ServerUnreachable extends Error {}

/** The server's base URL from what a user may pass: the base, the MCP endpoint, or host:port. */
export function serverBase(url: string): string {
  const parsed = new URL(/^[a-z][a-z\d+.-]*:\/\//i.test(url) ? url : `http://${url}`);
  const path = parsed.pathname.replace(/\/+$/, '').replace(/\/mcp$/, '');
  return `${parsed.protocol}//${parsed.host}${path}`;
}

export async function fetchSnapshot(base: string, windowS: number, timeoutMs = 5000): Promise<ServerSnapshot> {
  const url = `${base}/dashboard/api/snapshot?window=${windowS}`;
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), headers: authHeaders() });
  } catch (err) {
    throw new ServerUnreachable(`cannot reach a tensorgate server at ${base} (${reason(err, timeoutMs)})`);
  }
  if (!response.ok) {
    await response.body?.cancel();
    throw new ServerUnreachable(
      response.status === 401
        ? `${base} needs a credential: set TENSORGATE_TOKEN to an API key or JWT with the monitor role`
        : `${url} answered HTTP ${response.status}: is ${base} a tensorgate server?`,
    );
  }
  const body = (await response.json().catch(() => undefined)) as ServerSnapshot | undefined;
  if (!Array.isArray(body?.models)) throw new ServerUnreachable(`${url} did not answer a tensorgate snapshot`);
  return body;
}

function reason(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e.name === 'TimeoutError') return `no answer in ${timeoutMs / 1000} s`;
  return e.cause?.code ?? e.cause?.message ?? e.message ?? String(err);
}

export async function runTop(opts: TopOptions): Promise<void> {
  const base = serverBase(opts.url);
  if (opts.json || opts.once) {
    let snapshot: ServerSnapshot;
    try {
      snapshot = await fetchSnapshot(base, opts.window);
    } catch (err) {
      if (!(err instanceof ServerUnreachable)) throw err;
      throw new Error(`${err.message}; start one with \`tensorgate serve\` or pass --url`);
    }
    const text = opts.json
      ? JSON.stringify(snapshot, null, 2)
      : renderTop(snapshot, { width: process.stdout.columns ?? plainWidth() }).join('\n');
    process.stdout.write(`${text}\n`);
    return;
  }
  if (process.stdout.isTTY) await live(base, opts);
  else await plain(base, opts);
}

/** Stdout is a pipe or a file: a plain frame per interval, problems on stderr, until a signal. */
async function plain(base: string, opts: TopOptions): Promise<void> {
  const stop = stopper();
  // A reader that went away (`| head`) ends the loop rather than the process with EPIPE.
  process.stdout.on('error', stop.stop);
  try {
    while (!stop.stopped) {
      try {
        const lines = renderTop(await fetchSnapshot(base, opts.window), { width: plainWidth() });
        process.stdout.write(`${lines.join('\n')}\n\n`);
      } catch (err) {
        if (!(err instanceof ServerUnreachable)) throw err;
        process.stderr.write(`tensorgate top: ${err.message}; retrying every ${opts.interval} s\n`);
      }
      await stop.sleep(opts.interval * 1000);
    }
  } finally {
    process.stdout.off('error', stop.stop);
    stop.dispose();
  }
}

/** A terminal: redraw in place in the alternate screen; q, Ctrl-C or SIGTERM restore the terminal and end. */
async function live(base: string, opts: TopOptions): Promise<void> {
  const out = process.stdout;
  const stdin = process.stdin;
  const color = process.env.NO_COLOR === undefined || process.env.NO_COLOR === '';
  const stop = stopper();
  let snapshot: ServerSnapshot | undefined;
  let problem: string | undefined;
  let failures = 0;
  let lastAnswer = 0;

  const draw = () => {
    // One column spare: a full-width line leaves some terminals about to wrap.
    const width = Math.max(20, (out.columns ?? 80) - 1);
    const height = Math.max(3, out.rows ?? 24);
    const footer = `${base} · every ${opts.interval} s · q quits`;
    const lines = problem
      ? [
          `tensorgate top: ${problem}`,
          `retrying every ${opts.interval} s (${failures} ${failures === 1 ? 'try' : 'tries'} failed)` +
            (lastAnswer ? `; last answer ${Math.round((Date.now() - lastAnswer) / 1000)} s ago` : ''),
          '',
          'start a server with `tensorgate serve`, or pass --url; q quits',
        ].map((l) => l.slice(0, width))
      : renderTop(snapshot as ServerSnapshot, { width, height, color, footer: `${footer} · ${clock()}` });
    out.write(`${HOME}${lines.join(`${CLEAR_TO_EOL}\n`)}${CLEAR_TO_EOL}${CLEAR_BELOW}`);
  };
  const onKey = (key: Buffer) => {
    const k = key.toString();
    if (k === 'q' || k === 'Q' || k === '\x03') stop.stop();
  };
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    out.off('resize', onResize);
    if (stdin.isTTY) {
      stdin.off('data', onKey);
      stdin.setRawMode(false);
      stdin.pause();
    }
    out.write(ALT_SCREEN_OFF);
  };
  const onResize = () => {
    if (snapshot || problem) draw();
  };

  out.write(ALT_SCREEN_ON);
  process.once('exit', restore);
  out.on('resize', onResize);
  if (stdin.isTTY) {
    stdin.setRawMode(true);
    stdin.on('data', onKey);
    stdin.resume();
  }
  try {
    while (!stop.stopped) {
      try {
        snapshot = await fetchSnapshot(base, opts.window);
        problem = undefined;
        failures = 0;
        lastAnswer = Date.now();
      } catch (err) {
        if (!(err instanceof ServerUnreachable)) throw err;
        problem = err.message;
        failures++;
      }
      if (stop.stopped) break;
      draw();
      await stop.sleep(opts.interval * 1000);
    }
  } finally {
    restore();
    process.off('exit', restore);
    stop.dispose();
  }
}

/** Ends a loop on SIGINT or SIGTERM (or a call to stop), waking it from its sleep. */
function stopper() {
  let wake: (() => void) | undefined;
  const state = {
    stopped: false,
    stop: () => {
      state.stopped = true;
      wake?.();
    },
    sleep: (ms: number) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      }),
    dispose: () => {
      process.off('SIGINT', state.stop);
      process.off('SIGTERM', state.stop);
    },
  };
  process.on('SIGINT', state.stop);
  process.on('SIGTERM', state.stop);
  return state;
}

function plainWidth(): number {
  const columns = Number(process.env.COLUMNS);
  return Number.isInteger(columns) && columns > 0 ? columns : PLAIN_WIDTH;
}

function clock(): string {
  return new Date().toTimeString().slice(0, 8);
}
