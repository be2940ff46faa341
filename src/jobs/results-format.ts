import { extname } from 'node:path';

/**
 * How a job's result lines are written: JSON Lines (each item's whole answer), CSV for a
 * spreadsheet, or Parquet for a dataframe (docs/jobs.md#the-results-file). JSONL and CSV append one
 * line per item to the results file itself; Parquet, whose footer comes last, appends JSONL lines to
 * a file beside it and is written from them when the job ends. Either way the exactly-once commit
 * and resume of job-manager.ts work on an appended file.
 */

/** One item's line in the results file. */
export interface Line {
  index: number;
  item: string;
  error?: { code: string; message: string };
  [answer: string]: unknown;
}

export interface ResultsFormat {
  /** Written once when the file is created, before any item. */
  header: string;
  line(line: Line): string;
  /**
   * A format that cannot be appended to (Parquet) has its lines committed to a JSONL file beside
   * it, the results file written from them when the job ends: `linesPath` names that file.
   */
  linesPath?(results: string): string;
}

const jsonl: ResultsFormat = {
  header: '',
  line: (l) => `${JSON.stringify(l)}\n`,
};

/**
 * The columns of a results table (CSV, Parquet): index, item, the top label and its score (a
 * classification's first prediction), the text (text outputs), the error's code and message, and
 * the whole answer as JSON for everything else (detections, embeddings, outputs, a handler's
 * answer, every prediction).
 */
export interface TableRow {
  index: number;
  item: string;
  label: string | null;
  score: number | null;
  text: string | null;
  error: string | null;
  error_message: string | null;
  answer: Record<string, unknown> | null;
}

export const TABLE_COLUMNS = ['index', 'item', 'label', 'score', 'text', 'error', 'error_message', 'answer'] as const;

export function tableRow({ index, item, error, ...answer }: Line): TableRow {
  const top = (answer.predictions as { label?: string; score?: number }[] | undefined)?.[0];
  return {
    index,
    item,
    label: top?.label ?? null,
    score: top?.score ?? null,
    text: typeof answer.text === 'string' ? answer.text : null,
    error: error?.code ?? null,
    error_message: error?.message ?? null,
    answer: Object.keys(answer).length ? answer : null,
  };
}

const csv: ResultsFormat = {
  header: `${TABLE_COLUMNS.join(',')}\n`,
  line: (line) => {
    const row = tableRow(line);
    const cells = TABLE_COLUMNS.map((column) => {
      const value = row[column];
      return value === null ? '' : typeof value === 'object' ? JSON.stringify(value) : String(value);
    });
    return `${cells.map(csvCell).join(',')}\n`;
  },
};

/** RFC 4180: quoted when it holds a comma, a quote or a line break; quotes doubled. */
function csvCell(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replace(/"/g, '""')}"` : value;
}

/** Parquet: the lines as JSONL in `<results>.partial.jsonl`, the table written at the end (parquet-results.ts). */
const parquet: ResultsFormat = { ...jsonl, linesPath: (results) => `${results}.partial.jsonl` };

/** The format a results path asks for by its extension. */
export function resultsFormat(path: string): ResultsFormat {
  const extension = extname(path).toLowerCase();
  return extension === '.csv' ? csv : extension === '.parquet' ? parquet : jsonl;
}

/** Where a job's lines are committed: the results file, or the lines file of a format written at the end. */
export function linesPathOf(results: string): string {
  return resultsFormat(results).linesPath?.(results) ?? results;
}

/** The lines file of a format written when the job ends (Parquet); undefined for one appended to. */
export function endLinesPathOf(results: string): string | undefined {
  return resultsFormat(results).linesPath?.(results);
}
