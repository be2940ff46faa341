import type { ServerResponse } from 'node:http';
import { asTensorgateError } from '../errors.js';

/**
 * An HTTP answer as data: what a route computes, written here or handed to another thread to
 * write (the OIP data plane's threads write what the main thread answers).
 */
export interface HttpAnswer {
  status: number;
  headers: Record<string, string | number>;
  /** The body in order: none, one buffer, or a JSON header and then each large binary output. */
  parts: Uint8Array[];
}

export function jsonAnswer(status: number, body?: unknown): HttpAnswer {
  if (body === undefined) return { status, headers: {}, parts: [] };
  return { status, headers: { 'content-type': 'application/json' }, parts: [Buffer.from(JSON.stringify(body))] };
}

/** The protocol's error body, `{"error": "CODE: message"}`, with the code's HTTP status. */
export function errorAnswer(err: unknown, headers: Record<string, string> = {}): HttpAnswer {
  const error = asTensorgateError(err);
  const answer = jsonAnswer(error.status, { error: `${error.code}: ${error.message}` });
  return { ...answer, headers: { ...answer.headers, ...headers } };
}

/** Writes an answer: one write, or the parts as they are in one writev. */
export function writeAnswer(res: ServerResponse, { status, headers, parts }: HttpAnswer): void {
  const length = parts.reduce((sum, part) => sum + part.byteLength, 0);
  res.writeHead(status, { ...headers, 'content-length': length });
  if (parts.length <= 1) {
    res.end(parts[0]);
    return;
  }
  res.cork(); // end() uncorks: the parts leave together
  for (const part of parts) res.write(part);
  res.end();
}
