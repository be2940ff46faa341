import { closeSync, ftruncateSync, openSync, unlinkSync } from 'node:fs';
import type { Worker } from 'node:worker_threads';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { arenaPath } from '../../engines/torch/arena.js';
import { asTensorgateError } from '../../errors.js';
import type { Gateway } from '../../gateway.js';
import { errorAnswer, type HttpAnswer, jsonAnswer } from '../../http/answer.js';
import type { AuthGate } from '../../http/auth-gate.js';
import { ChunkedBody, type InferBody } from '../../http/body.js';
import type { TlsOptions } from '../../http/node-server.js';
import { type Logger, noLogger } from '../../observability/logger.js';
import type { RateLimiter } from '../../security/rate-limit.js';
import { startModuleThread } from '../../threads.js';
import { answerInfer } from '../infer-call.js';
import { metadataFor, readinessFor, serverMetadata, serverReady } from '../service.js';
import type { SharedMemoryRegistry } from '../shared-memory.js';
import type { MainMessage, ThreadMessage, ThreadOptions } from './messages.js';
import { StagedBody } from './staged-body.js';

/**
 * The OIP data plane: the protocol's data routes (health, metadata, readiness, infer) on a port
 * of their own, served by several threads. One JavaScript thread reading every request body caps
 * a server that takes image-sized tensors over HTTP: on the main port its CPU per call is mostly
 * HTTP parsing, the copy of the body into the worker's slot and the garbage of the socket reads
 * (docs/architecture.md, "The OIP data plane"). Here the threads do that work: each copies a
 * request's binary tensor data into its staging file and hands the main thread the JSON header
 * and where the bytes lie; the worker reads them from the file itself, as it reads a system
 * shared-memory region. The main thread checks the caller (auth, RBAC, rate limits), schedules,
 * and answers; the thread writes the answer. Everything else (MCP, the model repository, shared
 * memory registration, metrics, the dashboard) stays on the main port.
 */

export interface DataPlaneOptions {
  host: string;
  /** 0: any free port (the first thread's), which all threads then share. */
  port: number;
  threads: number;
  tls?: TlsOptions;
  /** Host names the Host and Origin checks accept (the main port's). */
  hostnames: string[];
  /** Connections each thread serves at once. */
  maxConnections: number;
  rateLimiter?: RateLimiter;
  /** The system shared-memory regions registered on the main port. */
  regions: SharedMemoryRegistry;
  /** The auth gate, when auth is on; asked per request (the server makes it once listening). */
  gate: () => AuthGate | undefined;
  log?: Logger;
  /**
   * Each thread's staging file: its first size, the most it may grow to, and the smallest binary
   * data staged (see the defaults).
   */
  staging?: { bytes?: number; limit?: number; fromBytes?: number };
}

/** A thread's staging file starts this large (sparse: tmpfs gives it pages as they are written). */
const STAGING_BYTES = 16 * 1024 * 1024;
/** How far it may grow, in request bodies; a body that finds no room travels in the message. */
const STAGING_BODIES = 8;
/**
 * Binary data under this size is not staged but sent in the message: for a small tensor the
 * worker's open and read of the staging file (tens of microseconds) cost more than the main
 * thread's copy of it into the worker's slot.
 */
const STAGE_FROM_BYTES = 16 * 1024;
/** A thread that dies is replaced after this long (it only dies of a bug: not in a tight loop). */
const RESTART_DELAY_MS = 200;
/** How long a closing thread gets to finish its connections before it is stopped. */
const CLOSE_GRACE_MS = 2000;

/** The staging file, open until its thread has exited and no request reads it any more. */
class StagingFile {
  readonly fd: number;
  private users = 1; // the thread

  constructor(tag: string, bytes: number) {
    // Named only while it is opened: an unlinked file needs no sweeping after a crash, and the
    // workers reach it through this process's descriptor (/proc/PID/fd/FD) like a region.
    const path = arenaPath(tag);
    this.fd = openSync(path, 'w+', 0o600);
    unlinkSync(path);
    ftruncateSync(this.fd, bytes);
  }

  hold(): () => void {
    this.users++;
    return () => this.release();
  }

  release(): void {
    if (--this.users === 0) closeSync(this.fd);
  }
}

interface DataThread {
  worker: Worker;
  staging: StagingFile;
  /** Requests being answered, to withdraw when their client goes away. */
  inflight: Map<number, AbortController>;
}

type Caller = { auth: AuthInfo | undefined } | { refusal: HttpAnswer };
type Asked = Extract<ThreadMessage, { t: 'ask' | 'infer' }>;

export class DataPlane {
  private readonly threads: DataThread[] = [];
  private closing = false;
  private generation = 0;
  /** The port every thread serves. */
  port = 0;

  private constructor(
    private readonly gateway: Gateway,
    private readonly options: DataPlaneOptions,
    private readonly log: Logger,
  ) {}

  static async start(gateway: Gateway, options: DataPlaneOptions): Promise<DataPlane> {
    const plane = new DataPlane(gateway, options, options.log ?? noLogger);
    try {
      // The first thread takes the port (0: any free one); the others bind the same one.
      plane.port = await plane.startThread(0, options.port);
      await Promise.all(Array.from({ length: options.threads - 1 }, (_, i) => plane.startThread(i + 1, plane.port)));
    } catch (err) {
      await plane.close();
      throw err;
    }
    return plane;
  }

  /** The threads' ids (worker_threads' threadId). */
  get threadIds(): number[] {
    return this.threads.map((t) => t.worker.threadId);
  }

  /** The threads themselves (a test stops one to see it replaced). */
  get workers(): readonly Worker[] {
    return this.threads.map((t) => t.worker);
  }

  /** The server begins to stop: the threads stop listening (ServerDrain); what they hold is answered. */
  stopIntake(): void {
    this.closing = true; // a thread that dies from here on is not replaced
    for (const { worker } of this.threads) worker.postMessage({ t: 'stop-intake' } satisfies MainMessage);
  }

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(
      this.threads.map(
        ({ worker }) =>
          new Promise<void>((resolve) => {
            const stop = setTimeout(() => void worker.terminate(), CLOSE_GRACE_MS);
            worker.once('exit', () => {
              clearTimeout(stop);
              resolve();
            });
            worker.postMessage({ t: 'close' } satisfies MainMessage);
          }),
      ),
    );
  }

  private get stagingBytes(): number {
    return this.options.staging?.bytes ?? STAGING_BYTES;
  }

  private startThread(index: number, port: number): Promise<number> {
    const staging = new StagingFile(`oip-${index}-${this.generation++}`, this.stagingBytes);
    const options: ThreadOptions = {
      index,
      host: this.options.host,
      port,
      ...(this.options.tls ? { tls: this.options.tls } : {}),
      hostnames: this.options.hostnames,
      maxBodyBytes: this.gateway.config.maxHttpBodyBytes,
      maxConnections: this.options.maxConnections,
      stagingFd: staging.fd,
      stagingBytes: this.stagingBytes,
      stagingLimit:
        this.options.staging?.limit ?? Math.max(STAGING_BYTES, STAGING_BODIES * this.gateway.config.maxHttpBodyBytes),
      stageFromBytes: this.options.staging?.fromBytes ?? STAGE_FROM_BYTES,
    };
    const worker = startModuleThread(import.meta.url, 'thread', options, `tensorgate-oip-${index}`);
    const thread: DataThread = { worker, staging, inflight: new Map() };
    this.threads[index] = thread;
    return new Promise((resolve, reject) => {
      let listening = false;
      worker.on('message', (message: ThreadMessage) => {
        if (message.t === 'listening') {
          listening = true;
          resolve(message.port);
        } else this.onMessage(thread, message);
      });
      worker.on('error', (err) => {
        if (!listening) reject(err);
        else this.log(`OIP data plane thread ${index} failed: ${err.message}`, { level: 'error', err });
      });
      worker.on('exit', (code) => {
        for (const request of thread.inflight.values()) request.abort();
        staging.release();
        if (!listening) {
          reject(new Error(`the OIP data plane thread ${index} exited (${code}) before it listened`));
          return;
        }
        if (this.closing) return;
        this.log(`OIP data plane thread ${index} exited (${code}); starting another`, { level: 'warn' });
        setTimeout(() => {
          if (this.closing) return;
          this.startThread(index, this.port).catch((err: unknown) =>
            this.log(`OIP data plane thread ${index} could not restart: ${String(err)}`, { level: 'error' }),
          );
        }, RESTART_DELAY_MS).unref();
      });
    });
  }

  private onMessage(thread: DataThread, message: ThreadMessage): void {
    if (message.t === 'gone') thread.inflight.get(message.id)?.abort();
    else if (message.t === 'infer') void this.infer(thread, message);
    else if (message.t === 'ask') void this.ask(thread, message);
  }

  /** The verified caller (nobody when auth is off), within its rate; or the refusal. */
  private async caller(message: Asked): Promise<Caller> {
    const gate = this.options.gate();
    const admission = gate ? await gate.verify(message.authorization, message.path, message.remote) : undefined;
    if (admission && 'refusal' in admission) return admission;
    const auth = admission?.auth;
    try {
      this.options.rateLimiter?.take(auth, message.remote);
    } catch (err) {
      const error = asTensorgateError(err);
      return { refusal: errorAnswer(error, { 'retry-after': String(error.data.retry_after_s ?? 1) }) };
    }
    return { auth };
  }

  private async ask(thread: DataThread, message: Extract<ThreadMessage, { t: 'ask' }>): Promise<void> {
    const { gateway } = this;
    let answer: HttpAnswer;
    try {
      // Readiness is open to all, as on the main port: orchestrators probe it without credentials.
      const caller: Caller = message.what === 'server-ready' ? { auth: undefined } : await this.caller(message);
      if ('refusal' in caller) answer = caller.refusal;
      else if (message.what === 'server-ready') answer = jsonAnswer(serverReady(gateway) ? 200 : 400);
      else if (message.what === 'server') answer = jsonAnswer(200, serverMetadata());
      else if (message.what === 'model')
        answer = jsonAnswer(200, metadataFor(gateway, caller.auth, message.model as string, message.version));
      else
        answer = jsonAnswer(readinessFor(gateway, caller.auth, message.model as string, message.version) ? 200 : 400);
    } catch (err) {
      answer = errorAnswer(err);
    }
    reply(thread, message.id, answer);
  }

  private async infer(thread: DataThread, message: Extract<ThreadMessage, { t: 'infer' }>): Promise<void> {
    const { id } = message;
    if (message.large) this.gateway.metrics.recordDataPlaneBody(message.staged !== undefined);
    const signal = new AbortController();
    thread.inflight.set(id, signal);
    const header = Buffer.from(message.header.buffer, message.header.byteOffset, message.header.byteLength);
    let staged: StagedBody | undefined;
    let body: InferBody;
    if (message.staged === undefined) body = new ChunkedBody([header], header.length);
    else {
      const release = thread.staging.hold();
      staged = new StagedBody(header, message.length, thread.staging.fd, message.staged, () => {
        thread.worker.postMessage({ t: 'free', id } satisfies MainMessage);
        release();
      });
      body = staged;
    }
    let answer: HttpAnswer;
    try {
      const caller = await this.caller(message);
      answer =
        'refusal' in caller
          ? caller.refusal
          : await answerInfer(this.gateway, this.options.regions, {
              auth: caller.auth,
              model: message.model,
              version: message.version,
              body: async () => body,
              headerLength: message.headerLength,
              signal: signal.signal,
              adapter: 'oip-data',
            });
    } catch (err) {
      this.gateway.recordFailure(err, { adapter: 'oip-data' });
      answer = errorAnswer(err);
    } finally {
      thread.inflight.delete(id);
      staged?.done();
    }
    reply(thread, id, answer);
  }
}

/**
 * Sends an answer to the thread that writes it. Each part is copied into a buffer of its own and
 * moved, not cloned: a part may be a view of a larger buffer (a pooled allocation, an output
 * arena), which a clone would copy whole and a transfer would take from its owner.
 */
function reply(thread: DataThread, id: number, answer: HttpAnswer): void {
  const parts = answer.parts.map((part) => new Uint8Array(part));
  thread.worker.postMessage(
    { t: 'answer', id, answer: { ...answer, parts } } satisfies MainMessage,
    parts.map((p) => p.buffer),
  );
}
