import { z } from 'zod';

/**
 * A batch job: one model with processing (or a workflow) run over many items (image or WAV files
 * in a folder or a list, the lines of a text file, or a column of a JSONL, CSV or Parquet table),
 * its answers written to a results file as it goes. The
 * request an agent sends with start_job; docs/jobs.md is its prose form.
 */

const FolderItems = z
  .object({
    /** An absolute folder under the allowed roots. */
    folder: z.string().min(1),
    /** Which files: a file-name pattern with * and ? ("*.png"); every file when absent. */
    pattern: z.string().min(1).optional(),
    /** Files in subfolders too. */
    recursive: z.boolean().default(false),
  })
  .strict();

const FileItems = z
  .object({
    /** Absolute paths under the allowed roots, in the order to run them. */
    files: z.array(z.string().min(1)).min(1).max(1_000_000),
  })
  .strict();

const TextItems = z
  .object({
    /** A UTF-8 file under the allowed roots: each non-empty line is one text. */
    lines: z.string().min(1),
  })
  .strict();

const TableItems = z
  .object({
    /** A .jsonl, .csv (with a header row) or .parquet file under the allowed roots. */
    table: z.string().min(1),
    /** The field (JSONL) or column (CSV, Parquet) whose values are the items: texts, or file paths. */
    column: z.string().min(1),
  })
  .strict();

const RowItems = z
  .object({
    /** A .npy or .safetensors file under the allowed roots: each row (along its first dimension) is an item. */
    rows: z.string().min(1),
    /** The tensor of a .safetensors file whose rows they are: needed when it holds more than one. */
    tensor: z.string().min(1).optional(),
  })
  .strict();

export const JobItemsSchema = z.union([FolderItems, FileItems, TextItems, TableItems, RowItems]);
export type JobItems = z.infer<typeof JobItemsSchema>;

export const JobSpecSchema = z
  .object({
    /** What runs: a model with processing, or a workflow whose inputs take files or texts; one of the two. */
    model: z
      .string()
      .min(1)
      .optional()
      .describe('a model with processing (see list_models): it takes files or texts; or give "workflow"'),
    workflow: z
      .string()
      .min(1)
      .optional()
      .describe('a workflow with an image, text or audio input (see list_workflows), run once per item'),
    version: z.string().optional().describe("model version; the model's default when omitted"),
    /** The processed input the items go to; the only one when absent. */
    input: z.string().optional().describe("the model's or workflow's input the items go to; its only one when omitted"),
    items: JobItemsSchema.describe(
      '{"folder": "/data/inbox", "pattern": "*.jpg", "recursive": false}, {"files": ["/data/a.png", ...]}, {"lines": "/data/texts.txt"} (one text per line) or {"table": "/data/docs.parquet", "column": "text"} (a JSONL, CSV or Parquet column of texts or file paths; every row an item); for a model that takes tensors, {"rows": "/data/features.npy"} (each row of the array an item; a .safetensors file too, with "tensor": its name when it holds several)',
    ),
    results: z
      .string()
      .min(1)
      .describe(
        "where to write the answers, one line per item: an absolute path under the allowed roots ending in .jsonl (each answer whole), .csv (top label, score, text, error, and the answer as JSON) or .parquet (the CSV's columns, written when the job ends)",
      ),
    overwrite: z.boolean().default(false).describe('replace a results file that exists (refused otherwise)'),
    /** Each output tensor as a .npy file beside the results, row i = item i (tensor-files.ts). */
    tensors: z
      .enum(['npy'])
      .optional()
      .describe(
        'also write each output tensor of the model, whole, as a .npy file beside the results (/data/emb.jsonl and output "embedding" give /data/emb.embedding.npy), row i holding item i (NaN for a failed item); the results lines then leave those rows out',
      ),
    /** Items per request (a model's max_batch_size when absent); for a workflow, runs at once (8). */
    batch: z
      .number()
      .int()
      .min(1)
      .max(1024)
      .optional()
      .describe(
        "items per request (the model's batch size by default); for a workflow, how many one-item runs go at once (8 by default)",
      ),
    /**
     * The longest one of its requests should keep the model busy, which is how long an interactive
     * call may wait for it: requests are sized by the model's pace to fit (at most `batch`).
     */
    max_pass_ms: z
      .number()
      .min(1)
      .max(600_000)
      .optional()
      .describe(
        "how long one of the job's requests may keep the model busy, the wait it may add to an interactive call (100 ms by default); requests are sized to fit",
      ),
    /** Stop the job once more items than this have failed; it runs to the end when absent. */
    max_failures: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe('stop the job once more items than this have failed (bad files); no limit when omitted'),
  })
  .strict();
export type JobSpec = z.infer<typeof JobSpecSchema>;

/**
 * `paused`: stopped at its last commit for a reason someone has to fix (a full disk); resume_job
 * runs it on from there.
 */
export type JobState = 'running' | 'paused' | 'completed' | 'failed' | 'cancelled';

/** Where a job stands; what is recorded in the registry after every request it commits. */
export interface JobProgress {
  items: number;
  /**
   * Items whose result line is written and committed, failed ones included: always the first
   * `done` items, as lines are committed in item order; a resumed job goes on from there.
   */
  done: number;
  failed: number;
  /** Failed items by error code. */
  errors: Record<string, number>;
  /** The results file's committed length: a resumed job cuts the file back to it. */
  results_bytes: number;
  /** With `tensors`: each output's .npy file (its committed rows are `done`). */
  tensors?: Record<string, string>;
  /** The first failed items of each error code (at most FAILED_ITEMS_KEPT), for the summary. */
  failed_items?: Record<string, string[]>;
  /** Seconds spent running, over every run of the job (a pause or a restart does not count). */
  run_seconds?: number;
  /** The stage timings of the job's requests, summed: where its time went. */
  stages?: { items: number; ms: Record<string, number> };
}
