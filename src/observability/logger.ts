/**
 * The logging contract the core depends on: a function taking a message and, where they are at
 * hand, structured fields. It knows nothing of pino; `logging.ts` provides the implementation,
 * and tests or benchmarks pass any function (or none).
 */

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** Fields of one record: `model`, `version`, `pid`, ...; `level` picks the level (default info). */
export interface LogFields {
  level?: Exclude<LogLevel, 'silent'>;
  [field: string]: unknown;
}

/** Lifecycle messages (model loading, worker output, shutdown); a plain `(line) => void` fits. */
export type Logger = (msg: string, fields?: LogFields) => void;

export const noLogger: Logger = () => {};
