import { ftruncateSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { FirstFitAllocator } from '../../engines/torch/allocator.js';
import { tgError } from '../../errors.js';
import { errorAnswer, type HttpAnswer, jsonAnswer, writeAnswer } from '../../http/answer.js';
import { type ChunkedBody, readBodyChunks } from '../../http/body.js';
import { createNodeServer, requestGuard } from '../../http/node-server.js';
import { HEADER_LENGTH, headerEnd } from '../infer-codec.js';
import type { MainMessage, ThreadMessage, ThreadOptions } from './messages.js';

/**
 * One thread of the OIP data plane (data-plane.ts): an HTTP server on the data port, which every
 * thread binds (SO_REUSEPORT: the kernel spreads connections over them). It parses requests,
 * reads bodies and copies a request's binary tensor data into its staging file, off the main
 * thread; it asks the main thread for the answer and writes it. It serves the protocol's data
 * routes: health, server and model metadata and readiness, and infer.
 */

const options = workerData as ThreadOptions;
const main = parentPort as NonNullable<typeof parentPort>;
const post = (message: ThreadMessage, transfer: ArrayBuffer[] = []) => main.postMessage(message, transfer);

/** How long a closing thread lets its connections finish, within the plane's own grace (data-plane.ts). */
const CLOSE_GRACE_MS = 1000;
const MODEL_ROUTE = /^\/v2\/models\/([^/]+)(?:\/versions\/([^/]+))?(\/ready|\/infer)?$/;

/** Requests waiting for the main thread's answer. */
const waiting = new Map<number, ServerResponse>();
/** Staging space per request, until the main thread frees it. */
const staged = new Map<number, number>();
let nextId = 1;

const staging = new FirstFitAllocator(options.stagingBytes);

/** Room for `bytes` in the staging file, growing it up to its limit; undefined when there is none. */
function reserve(bytes: number): number | undefined {
  const offset = staging.allocate(bytes);
  if (offset !== undefined || staging.capacity >= options.stagingLimit) return offset;
  const grown = Math.min(options.stagingLimit, Math.max(2 * staging.capacity, staging.capacity + 2 * bytes));
  ftruncateSync(options.stagingFd, grown);
  staging.grow(grown);
  return staging.allocate(bytes);
}

/**
 * Copies the body from `start` on into the staging file; where it lies there, or undefined when
 * it is not staged (no room, or the write failed: /dev/shm full), and then travels in the message.
 */
function stage(body: ChunkedBody, start: number): number | undefined {
  let position: number | undefined;
  try {
    position = reserve(body.length - start);
    if (position !== undefined) body.writeTo(options.stagingFd, start, body.length, position);
    return position;
  } catch {
    if (position !== undefined) staging.release(position);
    return undefined;
  }
}

/** Where the JSON header ends; the whole body when that is wrong (the main thread's parse says why). */
function jsonEnd(body: ChunkedBody, headerLength: string | undefined): number {
  try {
    return headerEnd(headerLength, body.length);
  } catch {
    return body.length;
  }
}

/** Bytes of the body in a buffer of their own: a view would carry its whole socket read along. */
function ownCopy(body: ChunkedBody, start: number, end: number): Uint8Array {
  const out = new Uint8Array(end - start);
  body.copyTo(out, start, end);
  return out;
}

function ask(res: ServerResponse, message: ThreadMessage & { id: number }, transfer: ArrayBuffer[] = []): void {
  waiting.set(message.id, res);
  res.once('close', () => {
    if (waiting.delete(message.id)) post({ t: 'gone', id: message.id });
  });
  post(message, transfer);
}

function caller(req: IncomingMessage, id: number, path: string) {
  return { id, path, authorization: req.headers.authorization, remote: req.socket.remoteAddress ?? 'unknown' };
}

async function infer(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  model: string,
  version: string | undefined,
) {
  const id = nextId++;
  const body = await readBodyChunks(req, options.maxBodyBytes);
  const headerLength = req.headers[HEADER_LENGTH] as string | undefined;
  const end = jsonEnd(body, headerLength);
  let position: number | undefined;
  const large = body.length - end >= options.stageFromBytes;
  if (large) position = stage(body, end);
  if (position !== undefined) staged.set(id, position);
  const header = ownCopy(body, 0, position === undefined ? body.length : end);
  ask(
    res,
    {
      t: 'infer',
      ...caller(req, id, path),
      model,
      version,
      header,
      length: body.length,
      staged: position,
      large,
      headerLength,
    },
    [header.buffer as ArrayBuffer],
  );
}

function route(req: IncomingMessage, res: ServerResponse): Promise<void> | void {
  const path = (req.url ?? '/').split('?')[0] as string;
  if (req.method === 'GET' && path === '/v2/health/live') return writeAnswer(res, jsonAnswer(200));
  if (req.method === 'GET' && (path === '/v2/health/ready' || path === '/v2' || path === '/v2/')) {
    const what = path === '/v2/health/ready' ? 'server-ready' : 'server';
    return ask(res, { t: 'ask', ...caller(req, nextId++, path), what });
  }
  const match = MODEL_ROUTE.exec(path.replace(/\/$/, ''));
  if (match) {
    const model = decode(match[1] as string);
    const version = match[2] === undefined ? undefined : decode(match[2]);
    const action = match[3];
    if (req.method === 'POST' && action === '/infer') return infer(req, res, path, model, version);
    if (req.method === 'GET' && action !== '/infer') {
      const what = action === '/ready' ? 'model-ready' : 'model';
      return ask(res, { t: 'ask', ...caller(req, nextId++, path), what, model, version });
    }
  }
  req.resume();
  writeAnswer(
    res,
    jsonAnswer(404, {
      error: `not found: ${req.method} ${path}; the OIP data port serves /v2, /v2/health, model metadata and readiness, and infer; everything else is on the main port`,
    }),
  );
}

function decode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw tgError('INVALID_REQUEST', `the path segment ${JSON.stringify(segment)} is not valid percent-encoding`);
  }
}

const guard = requestGuard(options.hostnames);

function listener(req: IncomingMessage, res: ServerResponse): void {
  if (!guard(req, res)) return;
  try {
    Promise.resolve(route(req, res)).catch((err: unknown) => fail(req, res, err));
  } catch (err) {
    fail(req, res, err);
  }
}

function fail(req: IncomingMessage, res: ServerResponse, err: unknown): void {
  req.resume(); // a body left unread would keep the socket busy
  if (res.headersSent) res.destroy();
  else writeAnswer(res, errorAnswer(err));
}

const { server, drain } = createNodeServer(options.tls, listener);
server.maxConnections = options.maxConnections;

main.on('message', (message: MainMessage) => {
  if (message.t === 'answer') {
    const res = waiting.get(message.id);
    if (!res) return; // its client went away
    waiting.delete(message.id);
    writeAnswer(res, message.answer as HttpAnswer);
  } else if (message.t === 'free') {
    const offset = staged.get(message.id);
    if (offset === undefined) return;
    staged.delete(message.id);
    staging.release(offset);
  } else if (message.t === 'stop-intake') {
    drain.stopIntake();
  } else if (message.t === 'close') {
    void drain.finish(CLOSE_GRACE_MS).then(() => main.close());
  }
});

server.listen({ port: options.port, host: options.host, reusePort: true }, () => {
  post({ t: 'listening', port: (server.address() as AddressInfo).port });
});
