/**
 * `--log-format pretty`: each JSON record pino writes becomes one compact line for a person,
 *
 *   14:03:07.412 INFO  ready tabular-classifier@1 on cpu: load 41.2 ms model=tabular-classifier version=1
 *
 * time of day (UTC, like the JSON `time`), level, message, then the other fields as key=value;
 * values with spaces or quotes are JSON-quoted. Only this format parses records back, so the JSON
 * format pays nothing for it.
 */

const LEVEL_LABELS: Record<string, string> = {
  trace: 'TRACE',
  debug: 'DEBUG',
  info: 'INFO ',
  warn: 'WARN ',
  error: 'ERROR',
  fatal: 'FATAL',
};

/** One record as a line (without the newline). */
export function prettyLine(record: Record<string, unknown>): string {
  const { time, level, msg, ...fields } = record;
  const parts = [
    typeof time === 'number' ? new Date(time).toISOString().slice(11, 23) : '--:--:--.---',
    LEVEL_LABELS[String(level)] ?? String(level).toUpperCase(),
  ];
  if (msg !== undefined && msg !== '') parts.push(String(msg));
  for (const [key, value] of Object.entries(fields)) {
    if (value !== undefined) parts.push(`${key}=${prettyValue(value)}`);
  }
  return parts.join(' ');
}

function prettyValue(value: unknown): string {
  if (typeof value === 'string') return value === '' || /[\s"=]/.test(value) ? JSON.stringify(value) : value;
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return String(value);
  return JSON.stringify(value);
}

/** A pino destination that rewrites each JSON line as a pretty one on `out`. */
export function prettyStream(out: { write(chunk: string): unknown }): { write(chunk: string): void } {
  return {
    write(chunk: string) {
      let record: Record<string, unknown>;
      try {
        record = JSON.parse(chunk) as Record<string, unknown>;
      } catch {
        out.write(chunk);
        return;
      }
      out.write(`${prettyLine(record)}\n`);
    },
  };
}
