import type { IncomingMessage } from 'node:http';
import { tgError } from '../errors.js';

/**
 * The whole body, up to `limit` bytes (INPUT_TOO_LARGE past it). Read with 'data' and 'end'
 * listeners rather than `for await`: the async iterator costs a promise and a microtask per chunk,
 * a visible share of a small binary request.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return Promise.reject(tooLarge(limit));
  return new Promise((resolveBody, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        cleanup();
        req.resume(); // drain the rest unread, so that the refusal can still be answered
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolveBody(chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const onClose = () => {
      cleanup();
      reject(tgError('INVALID_REQUEST', 'the client closed the connection before the request body ended'));
    };
    const cleanup = () => {
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
    };
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  });
}

function tooLarge(limit: number) {
  return tgError(
    'INPUT_TOO_LARGE',
    `the request body is over the ${limit}-byte limit; start the server with a larger --max-body-mb`,
    { limit },
  );
}
