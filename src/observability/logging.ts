import { writeSync } from 'node:fs';
import { type Logger as PinoLogger, pino } from 'pino';
import type { LogFormat, Logger, LogLevel } from './logger.js';
import { prettyStream } from './pretty.js';
import { RequestLog } from './request-log.js';

/**
 * The process's logs: pino writing one JSON record per line to stderr (never stdout, which may be
 * the MCP stdio channel), or the same records as pretty lines. Writes are asynchronous and
 * buffered, except on a terminal, where log lines and progress bars must come out in the order
 * they were written; `close()` writes out what is buffered, and pino flushes synchronously on any
 * other exit.
 */

export interface LoggingOptions {
  level?: LogLevel;
  format?: LogFormat;
  /** A file descriptor or a file path; default 2 (stderr). */
  dest?: number | string;
  /** Write synchronously; default: only when the destination is stderr on a terminal. */
  sync?: boolean;
}

export interface Logging {
  readonly pino: PinoLogger;
  /** Lifecycle messages, for the call sites that take a `Logger`. */
  readonly log: Logger;
  /** One record per inference request: attach it to the gateway with `gateway.observe()`. */
  readonly requests: RequestLog;
  /** Writes out everything buffered; later records are written synchronously. */
  close(): Promise<void>;
}

export function createLogging(options: LoggingOptions = {}): Logging {
  const dest = options.dest ?? 2;
  const sync = options.sync ?? (dest === 2 && process.stderr.isTTY === true);
  const out = new Destination(
    // Asynchronous: records gather up to 4 KiB, or 100 ms, per write, so that a request costs no
    // system call of its own (a write per record costs more than building the record).
    pino.destination(sync ? { dest, sync } : { dest, sync, minLength: 4096 }),
    dest === 1 || dest === 2 ? dest : undefined,
    sync ? 0 : FLUSH_MS,
  );
  const logger = pino(
    {
      level: options.level ?? 'info',
      // No pid or hostname in every record: collectors add where a line came from.
      base: null,
      formatters: { level: (label) => ({ level: label }) },
    },
    options.format === 'pretty' ? prettyStream(out) : out,
  );
  const log: Logger = (msg, fields) => {
    if (fields === undefined) {
      logger.info(msg);
      return;
    }
    const { level = 'info', ...rest } = fields;
    logger[level](rest, msg);
  };
  const requests = new RequestLog(logger);
  return {
    pino: logger,
    log,
    requests,
    close: () => out.close(),
  };
}

/** The longest a buffered record waits to be written. */
const FLUSH_MS = 100;

/**
 * A SonicBoom that, once closed, hands later lines straight to stderr (or stdout) when it wrote
 * there.
 *
 * It flushes what is buffered within `flushMs` of a record, by a timer armed only while there may
 * be something to write: SonicBoom's own `periodicFlush` writes every interval, an empty write
 * through the thread pool when idle, which woke an idle gateway ten times a second.
 */
class Destination {
  private closed = false;
  private closing: Promise<void> | undefined;
  private flushTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly sonic: ReturnType<typeof pino.destination>,
    private readonly fd: number | undefined,
    private readonly flushMs: number,
  ) {
    // A flush asked while a write is in flight does nothing: what came meanwhile is flushed after
    // that write. The last flush finds nothing and writes 0 bytes, which arms nothing.
    if (flushMs > 0) sonic.on('write', (n: number) => n > 0 && this.armFlush());
  }

  private armFlush(): void {
    if (this.flushTimer || this.closed) return;
    this.flushTimer = setTimeout(this.flush, this.flushMs);
    this.flushTimer.unref();
  }

  private readonly flush = (): void => {
    this.flushTimer = undefined;
    if (this.closed || this.closing) return;
    try {
      this.sonic.flush();
    } catch {
      // Destroyed underneath (the process is exiting): a timer must not throw; exit flushes.
    }
  };

  write(line: string): void {
    if (!this.closed) {
      try {
        this.sonic.write(line);
        if (this.flushMs > 0) this.armFlush();
        return;
      } catch {
        // Closed underneath (the last bytes are being synced): write directly.
      }
    }
    if (this.fd !== undefined) writeSync(this.fd, line);
  }

  close(): Promise<void> {
    clearTimeout(this.flushTimer);
    this.closing ??= new Promise((resolve) => {
      this.sonic.once('close', () => {
        this.closed = true;
        resolve();
      });
      this.sonic.end();
    });
    return this.closing;
  }
}
