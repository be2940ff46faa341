import { existsSync } from 'node:fs';
import type { Socket } from 'node:net';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ErrorCode, isErrorCode, type TensorgateError, tgError } from '../../errors.js';
import { type LogFields, type Logger, noLogger } from '../../observability/logger.js';
import { forkWorker } from './fork-server.js';
import { encodeFrame, FrameDecoder } from './frame.js';
import { forwardLines, type LaunchedWorker, spawnWorker } from './launch.js';
import { type Hello, HelloSchema, ReplySchema } from './protocol.js';

/**
 * One Python worker process and its control channel. It knows nothing about models or tensors:
 * it sends requests, matches replies by id, and fails every pending request when the process dies.
 */

/** The folder holding the `tensorgate` Python package (the worker, the exporter). */
export const PYTHON_PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../../../python');

/**
 * The interpreter that runs workers and the exporters: `$TENSORGATE_PYTHON` (a user's own, with
 * torch), else the checkout's `.tensorgate/venv` (where scripts/setup.sh installs the pinned torch),
 * else `python3` on PATH.
 */
export function pythonExecutable(): string {
  if (process.env.TENSORGATE_PYTHON) return process.env.TENSORGATE_PYTHON;
  return existsSync(PROJECT_VENV_PYTHON) ? PROJECT_VENV_PYTHON : 'python3';
}

/**
 * How workers start: `fork` (the default on Linux) forks them from a process that has imported
 * torch once (fork-server.ts); `spawn` starts each as a new interpreter. `$TENSORGATE_WORKER_START`
 * picks, read at each start.
 */
export function workerStart(): 'fork' | 'spawn' {
  const chosen = process.env.TENSORGATE_WORKER_START;
  if (chosen === 'fork' || chosen === 'spawn') return chosen;
  if (chosen) throw tgError('LOAD_FAILED', `TENSORGATE_WORKER_START is "${chosen}"; use "fork" or "spawn"`);
  return process.platform === 'linux' ? 'fork' : 'spawn';
}

/** The project's own virtual environment's interpreter (scripts/setup.sh). */
export const PROJECT_VENV_PYTHON = resolve(PYTHON_PACKAGE_DIR, '../.tensorgate/venv/bin/python');

export interface WorkerOptions {
  arenaIn: string;
  arenaOut: string;
  outBytes: number;
  /** Label used in logs, e.g. "image-classifier@1#0". */
  label: string;
  /** The worker's output, a record per line: its log records at their level, anything else as is. */
  onLog?: Logger;
  /** Added to each of those records (model, version). */
  logFields?: LogFields;
  startTimeoutMs?: number;
}

interface Pending {
  resolve: (result: Record<string, unknown>) => void;
  reject: (err: TensorgateError) => void;
}

export class WorkerProcess {
  private readonly launched: LaunchedWorker;
  /** Set once the worker's streams are in (spawned: at once; forked: when it connects back). */
  private channel: Socket | undefined;
  private readonly decoder = new FrameDecoder();
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private exitError: TensorgateError | undefined;
  private readonly exitListeners: ((err: TensorgateError) => void)[] = [];
  readonly hello: Promise<Hello>;

  constructor(private readonly options: WorkerOptions) {
    const argv = [
      '--arena-in',
      options.arenaIn,
      '--arena-out',
      options.arenaOut,
      '--out-bytes',
      String(options.outBytes),
      // A forked worker's parent is its fork server; the descriptors it opens are the gateway's.
      '--gateway-pid',
      String(process.pid),
    ];
    const env = { ...process.env, PYTHONPATH: joinPythonPath(PYTHON_PACKAGE_DIR), PYTHONUNBUFFERED: '1' };
    const log = options.onLog ?? noLogger;
    this.launched =
      workerStart() === 'fork'
        ? forkWorker(pythonExecutable(), argv, env, log)
        : spawnWorker(pythonExecutable(), argv, env);

    let helloResolve!: (h: Hello) => void;
    let helloReject!: (err: TensorgateError) => void;
    this.hello = new Promise<Hello>((res, rej) => {
      helloResolve = res;
      helloReject = rej;
    });
    // Callers may only look at `hello` later; keep an early crash from becoming an unhandled rejection.
    this.hello.catch(() => {});
    const startTimer = setTimeout(
      () => helloReject(tgError('LOAD_FAILED', `worker ${options.label} did not start within ${this.startTimeout} ms`)),
      this.startTimeout,
    );

    this.launched.streams.then(({ channel, stdout, stderr }) => {
      this.channel = channel;
      const fields = { ...options.logFields, worker: options.label, pid: this.launched.pid };
      forwardLines(stdout, (line) => log(line, { ...fields, stream: 'stdout' }));
      forwardLines(stderr, (line) => {
        const record = WORKER_RECORD.exec(line);
        if (record) log(record[3] as string, { ...fields, level: WORKER_LEVELS[record[2] as string] ?? 'info' });
        // Not a log record: a warning printed by a library, a traceback line.
        else log(line, { ...fields, level: 'warn', stream: 'stderr' });
      });
      channel.on('data', (chunk: Buffer) => {
        for (const message of this.decoder.push(chunk)) {
          const m = message as { op?: string };
          if (m.op === 'hello') {
            clearTimeout(startTimer);
            helloResolve(HelloSchema.parse(message));
          } else this.onReply(message);
        }
      });
      channel.on('error', () => {}); // The exit handler reports the failure with the exit status.
      for (const stream of [channel, stdout, stderr]) stream.resume();
    });
    this.launched.onExit((reason, signal) => {
      clearTimeout(startTimer);
      this.onExit(reason, signal);
      helloReject(this.exitError as TensorgateError);
    });
  }

  private get startTimeout(): number {
    return this.options.startTimeoutMs ?? 60_000;
  }

  get pid(): number | undefined {
    return this.launched.pid;
  }

  get alive(): boolean {
    return this.exitError === undefined;
  }

  onExitOnce(listener: (err: TensorgateError) => void): void {
    this.exitListeners.push(listener);
  }

  /** Sends a request and resolves with the worker's `result`, or rejects with its structured error. */
  request(op: string, body: Record<string, unknown> = {}): Promise<Record<string, unknown>> {
    if (this.exitError) return Promise.reject(this.exitError);
    const channel = this.channel;
    if (!channel) return Promise.reject(tgError('LOAD_FAILED', `worker ${this.options.label} has not started yet`));
    const id = this.nextId++;
    return new Promise((resolvePromise, reject) => {
      this.pending.set(id, { resolve: resolvePromise, reject });
      channel.write(encodeFrame({ id, op, ...body }));
    });
  }

  async shutdown(timeoutMs = 5000): Promise<void> {
    if (this.exitError) return;
    const exited = new Promise<void>((res) => this.onExitOnce(() => res()));
    if (this.channel) this.request('shutdown').catch(() => {});
    else this.kill(); // not started yet: nothing to finish
    const timer = setTimeout(() => this.kill(), timeoutMs);
    await exited;
    clearTimeout(timer);
  }

  kill(): void {
    this.launched.kill();
  }

  private onReply(message: unknown): void {
    const reply = ReplySchema.parse(message);
    const pending = this.pending.get(reply.id);
    if (!pending) return;
    this.pending.delete(reply.id);
    if (reply.ok) {
      pending.resolve(reply.result);
      return;
    }
    const code: ErrorCode = isErrorCode(reply.error.code) ? reply.error.code : 'INFERENCE_FAILED';
    // The class of a Python exception that caused it reads like Python's last traceback line;
    // the worker's own refusals (WorkerError without a cause) need no prefix.
    const type = reply.error.type && reply.error.type !== 'WorkerError' ? `${reply.error.type}: ` : '';
    pending.reject(tgError(code, `${type}${reply.error.message}`, { worker: this.options.label }));
  }

  private onExit(reason: string, signal?: NodeJS.Signals): void {
    if (this.exitError) return;
    this.exitError = tgError('WORKER_CRASHED', `worker ${this.options.label} ${reason}; it is restarted, retry`, {
      worker: this.options.label,
      ...(signal ? { signal } : {}),
      retryable: true,
    });
    for (const p of this.pending.values()) p.reject(this.exitError);
    this.pending.clear();
    for (const listener of this.exitListeners) listener(this.exitError);
  }
}

/** PYTHONPATH with `dir` first, for a Python process importing the `tensorgate` package. */
export function joinPythonPath(dir: string): string {
  return process.env.PYTHONPATH ? `${dir}:${process.env.PYTHONPATH}` : dir;
}

/** A record of the worker's own logging: `tensorgate.worker[PID] LEVEL message` (worker.py). */
const WORKER_RECORD = /^tensorgate\.worker\[(\d+)\] ([A-Z]+) (.*)$/;
const WORKER_LEVELS: Record<string, LogFields['level']> = {
  DEBUG: 'debug',
  INFO: 'info',
  WARNING: 'warn',
  ERROR: 'error',
  CRITICAL: 'error',
};
