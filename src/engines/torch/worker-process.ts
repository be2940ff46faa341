import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Socket } from 'node:net';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ErrorCode, isErrorCode, type TensorgateError, tgError } from '../../errors.js';
import { type LogFields, type Logger, noLogger } from '../../observability/logger.js';
import { encodeFrame, FrameDecoder } from './frame.js';
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
  private readonly child: ChildProcess;
  private readonly channel: Socket;
  private readonly decoder = new FrameDecoder();
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private exitError: TensorgateError | undefined;
  private readonly exitListeners: ((err: TensorgateError) => void)[] = [];
  readonly hello: Promise<Hello>;

  constructor(private readonly options: WorkerOptions) {
    this.child = spawn(
      pythonExecutable(),
      [
        '-m',
        'tensorgate.worker',
        '--arena-in',
        options.arenaIn,
        '--arena-out',
        options.arenaOut,
        '--out-bytes',
        String(options.outBytes),
      ],
      {
        // fd 3 is a Unix socket pair: the control channel. No path on disk, EOF when either side dies.
        stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
        env: { ...process.env, PYTHONPATH: joinPythonPath(PYTHON_PACKAGE_DIR), PYTHONUNBUFFERED: '1' },
      },
    );
    this.channel = this.child.stdio[3] as Socket;
    const log = options.onLog ?? noLogger;
    const fields = { ...options.logFields, worker: options.label, pid: this.child.pid };
    forwardLines(this.child.stdout, (line) => log(line, { ...fields, stream: 'stdout' }));
    forwardLines(this.child.stderr, (line) => {
      const record = WORKER_RECORD.exec(line);
      if (record) log(record[3] as string, { ...fields, level: WORKER_LEVELS[record[2] as string] ?? 'info' });
      // Not a log record: a warning printed by a library, a traceback line.
      else log(line, { ...fields, level: 'warn', stream: 'stderr' });
    });

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

    this.channel.on('data', (chunk: Buffer) => {
      for (const message of this.decoder.push(chunk)) {
        const m = message as { op?: string };
        if (m.op === 'hello') {
          clearTimeout(startTimer);
          helloResolve(HelloSchema.parse(message));
        } else this.onReply(message);
      }
    });
    this.channel.on('error', () => {}); // The exit handler reports the failure with the exit status.
    this.child.on('error', (err) => this.onExit(`could not start ${pythonExecutable()}: ${err.message}`));
    this.child.on('exit', (code, signal) => {
      clearTimeout(startTimer);
      this.onExit(`exited with ${signal ? `signal ${signal}` : `code ${code}`}`, signal ?? undefined);
      helloReject(this.exitError as TensorgateError);
    });
  }

  private get startTimeout(): number {
    return this.options.startTimeoutMs ?? 60_000;
  }

  get pid(): number | undefined {
    return this.child.pid;
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
    const id = this.nextId++;
    return new Promise((resolvePromise, reject) => {
      this.pending.set(id, { resolve: resolvePromise, reject });
      this.channel.write(encodeFrame({ id, op, ...body }));
    });
  }

  async shutdown(timeoutMs = 5000): Promise<void> {
    if (this.exitError) return;
    const exited = new Promise<void>((res) => this.child.once('exit', () => res()));
    this.request('shutdown').catch(() => {});
    const timer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    await exited;
    clearTimeout(timer);
  }

  kill(): void {
    this.child.kill('SIGKILL');
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

function forwardLines(stream: NodeJS.ReadableStream | null, sink: (line: string) => void): void {
  if (!stream) return;
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    const lines = (rest + chunk).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) if (line.trim()) sink(line);
  });
  stream.on('end', () => {
    if (rest.trim()) sink(rest);
  });
}
