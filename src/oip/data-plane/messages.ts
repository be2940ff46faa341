import type { HttpAnswer } from '../../http/answer.js';
import type { TlsOptions } from '../../http/node-server.js';

/**
 * What the OIP data plane's threads and the main thread say to each other (data-plane.ts). The
 * threads own the sockets: HTTP parsing, reading bodies, staging tensor bytes, writing answers.
 * The main thread owns everything else (auth, RBAC, rate limits, the models): it receives a
 * request's small JSON header and where its tensor bytes lie, never the bytes.
 */

export interface ThreadOptions {
  index: number;
  host: string;
  /** 0 for the first thread (any free port); the others bind the port it got (SO_REUSEPORT). */
  port: number;
  tls?: TlsOptions;
  /** Host names the Host and Origin checks accept. */
  hostnames: string[];
  maxBodyBytes: number;
  maxConnections: number;
  /** The staging file, opened by the main thread (and already unlinked): this thread writes it. */
  stagingFd: number;
  stagingBytes: number;
  /** The size the staging file may grow to; a body that finds no room then travels in the message. */
  stagingLimit: number;
  /**
   * Binary data smaller than this travels in the message: a worker opening the staging file
   * costs more than the main thread copying a few kilobytes.
   */
  stageFromBytes: number;
}

/** A request the main thread answers; `authorization` and `remote` identify the caller. */
interface Asked {
  id: number;
  path: string;
  authorization: string | undefined;
  remote: string;
}

export type ThreadMessage =
  | { t: 'listening'; port: number }
  | (Asked & {
      t: 'infer';
      model: string;
      version: string | undefined;
      /** The body up to its binary data (the JSON header); the whole body when nothing is staged. */
      header: Uint8Array;
      /** The whole body's length. */
      length: number;
      /** Where the body's bytes after `header` start in the staging file; unset when not staged. */
      staged: number | undefined;
      /** Whether its binary data is large enough to stage (staged, or not for want of room). */
      large: boolean;
      headerLength: string | undefined;
    })
  | (Asked & {
      t: 'ask';
      what: 'server' | 'server-ready' | 'model' | 'model-ready';
      model?: string;
      version?: string | undefined;
    })
  /** The client of request `id` went away before its answer. */
  | { t: 'gone'; id: number };

export type MainMessage =
  | { t: 'answer'; id: number; answer: HttpAnswer }
  /** The staged bytes of request `id` are no longer read: the space may be reused. */
  | { t: 'free'; id: number }
  /** The server begins to stop: stop listening, and close each connection after its answer. */
  | { t: 'stop-intake' }
  | { t: 'close' };
