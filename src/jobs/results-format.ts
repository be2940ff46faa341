import { extname } from 'node:path';

/**
 * How a job's result lines are written: JSON Lines (each item's whole answer), or CSV for a
 * spreadsheet (docs/jobs.md#the-results-file). Both append one line per item, so the exactly-once
 * commit and resume of job-manager.ts work alike for both.
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
}

const jsonl: ResultsFormat = {
  header: '',
  line: (l) => `${JSON.stringify(l)}\n`,
};

/**
 * index, item, the top label and its score (a classification's first prediction), the text (text
 * outputs), the error's code and message, and the whole answer as JSON for everything else
 * (detections, embeddings, outputs, a handler's answer, every prediction).
 */
const csv: ResultsFormat = {
  header: 'index,item,label,score,text,error,error_message,answer\n',
  line: ({ index, item, error, ...answer }) => {
    const top = (answer.predictions as { label?: string; score?: number }[] | undefined)?.[0];
    const cells = [
      String(index),
      item,
      top?.label ?? '',
      top?.score !== undefined ? String(top.score) : '',
      typeof answer.text === 'string' ? answer.text : '',
      error?.code ?? '',
      error?.message ?? '',
      Object.keys(answer).length ? JSON.stringify(answer) : '',
    ];
    return `${cells.map(csvCell).join(',')}\n`;
  },
};

/** RFC 4180: quoted when it holds a comma, a quote or a line break; quotes doubled. */
function csvCell(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replace(/"/g, '""')}"` : value;
}

/** The format a results path asks for by its extension. */
export function resultsFormat(path: string): ResultsFormat {
  return extname(path).toLowerCase() === '.csv' ? csv : jsonl;
}
