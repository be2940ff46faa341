import { randomUUID } from 'node:crypto';
import { closeSync, fstatSync, fsyncSync, ftruncateSync } from 'node:fs';
import type { NamedTensor } from '../engines/engine.js';
import { asTensorgateError, type TensorgateError, tgError } from '../errors.js';
import type { InferenceResult, InferOptions, TensorInferenceRequest, TensorInferenceResult } from '../gateway.js';
import type { JobRecord, RegistryStore } from '../registry/store.js';
import type { InferenceRequest } from '../requests/inference-request.js';
import { roundSignificant } from '../tensor/number-format.js';
import { fileRowsSource } from '../tensor/tensor-file.js';
import type { WorkflowOutputValue } from '../workflows/executor.js';
import { answerOf, rowOf, workflowAnswer } from './answers.js';
import { checkResultsPath, listItems, openResultsFile, removeResultsFile } from './items.js';
import { writeParquetResults } from './parquet-results.js';
import { endLinesPathOf, type Line, linesPathOf, resultsFormat } from './results-format.js';
import { type JobProgress, type JobSpec, JobSpecSchema, type JobState } from './spec.js';
import { resolveTarget, type Target, type TargetHost } from './target.js';
import { type ItemRows, rowsOfItems, TensorFiles, tensorPath, writeAll } from './tensor-files.js';

/**
 * Batch jobs: a model with processing, or a workflow taking files or texts, run over many items,
 * its answers appended to a JSONL file as it goes. Items go through the same path as interactive
 * calls (decode, queue, batching, workers): a model's `batch` at a time, a workflow's one per run,
 * with at most `lanes` requests of the job in flight, so a job keeps the models busy while an
 * interactive call waits behind at most those (docs/jobs.md).
 *
 * Every request's lines are written in item order and fsynced before the job's progress (items
 * done, the file's committed length) is recorded in the registry database. A job interrupted
 * anywhere (cancelled, the server stopped or killed) is therefore consistent at its last commit:
 * resuming cuts the file back to the recorded length and runs the items after it, so each item's
 * line is in the file exactly once. A write the disk refuses (full, or the file at its size limit)
 * pauses the job at that same point, to be resumed once there is room.
 */

/** A request's answers: its items' lines, and their output rows when the job writes tensors. */
interface Answered {
  lines: Line[];
  rows: ItemRows[];
}

/** What the manager needs of the gateway. */
export interface JobHost extends TargetHost {
  infer(request: InferenceRequest, options?: InferOptions): Promise<InferenceResult>;
  /** A model that takes tensors, given them as sources (a job's rows, read straight into the arena). */
  inferTensors(request: TensorInferenceRequest, options?: InferOptions): Promise<TensorInferenceResult>;
  /** One run of a workflow on files or texts, its outputs. */
  runWorkflow(name: string, inputs: Record<string, unknown>, options: InferOptions): Promise<WorkflowOutputValue[]>;
  store: RegistryStore;
  /** Whether anything but a job called `model` within the last `ms` (or is calling it now). */
  interactiveSince(model: string, ms: number): boolean;
  /** How long `model` has had no call but a job's in flight: 0 while one is. */
  interactiveQuietMs(model: string): number;
  log(message: string, fields: Record<string, unknown>): void;
}

/** A job as get_job and list_jobs answer it. */
export interface JobInfo {
  id: string;
  /** What it runs: a model, or a workflow. */
  model?: string;
  workflow?: string;
  version?: string;
  state: JobState;
  results: string;
  /** With `tensors`: each output's .npy file, row i holding item i. */
  tensors?: Record<string, string>;
  /** The first failed items of each error code (the results file has every one, with its message). */
  failed_items?: Record<string, string[]>;
  /** Where the time went: each stage's milliseconds per item, over the job's requests (a model job). */
  ms_per_item?: Record<string, number>;
  items: number;
  done: number;
  failed: number;
  errors: Record<string, number>;
  /** Items per second: since this process started (or resumed) it while it runs, over its running time after. */
  items_per_second?: number;
  /** Seconds left at that pace. */
  eta_s?: number;
  /** Items sent to the model and not yet answered (while it runs in this process). */
  in_flight?: number;
  error?: string;
  created_at: string;
  created_by: string | null;
  updated_at: string;
}

/** Errors about one item: the item is recorded as failed and the job goes on. */
const ITEM_ERRORS = new Set([
  'BAD_IMAGE',
  'IMAGE_FORMAT_NOT_SUPPORTED',
  'IMAGE_TOO_LARGE',
  'BAD_TEXT',
  'TEXT_TOO_LONG',
  'BAD_AUDIO',
  'AUDIO_FORMAT_NOT_SUPPORTED',
  'AUDIO_TOO_LONG',
  'FILE_NOT_FOUND',
  'PATH_NOT_ALLOWED',
  'INPUT_TOO_LARGE',
  'HANDLER_FAILED',
  'WORKFLOW_CONDITION_FAILED',
]);

/** How many failed items of each error code a job's summary names (the results file has them all). */
const FAILED_ITEMS_KEPT = 10;
/** A model called by anything but a job within this many ms has interactive traffic. */
const INTERACTIVE_MS = 1000;
/** The longest a job's request should keep a model busy when the job does not say. */
const DEFAULT_PASS_MS = 100;
/** How often a job stepping back for interactive calls looks whether it may send the next item. */
const YIELD_POLL_MS = 2;
/**
 * A job stepping back sends its one item once the model has had no other call in flight for this
 * long: the pause between calls a client makes back to back is shorter, an agent's pause longer.
 */
const QUIET_MS = 50;
/** ...or once it has waited this long, so a model kept busy without a pause does not stall a job. */
const STARVE_MS = 1000;

/** Errors that may pass: the request is tried again after a pause (each pause longer). */
const TRANSIENT_ERRORS = new Set(['MODEL_NOT_READY', 'WORKER_CRASHED', 'TIMEOUT', 'QUEUE_FULL', 'INFERENCE_FAILED']);
const RETRY_MS = [250, 1000, 4000, 16_000];

interface Running {
  record: Omit<JobRecord, 'progress'> & { progress: JobProgress };
  spec: JobSpec;
  abort: AbortController;
  /** Why it stopped, when it did not run to the end. */
  stopping?: 'cancel' | 'shutdown' | { failed: string } | { paused: TensorgateError };
  /** Items sent and not yet answered: one while the job gives way to interactive calls. */
  inFlightItems: number;
  /** Items in its next request: as many as fit in `max_pass_ms` at the model's pace (resize()). */
  requestSize: number;
  /** Told after every commit: start_job's waiting form sends them on as progress. */
  listeners: Set<(job: JobInfo) => void>;
  startedAt: number;
  doneAtStart: number;
  /** When it last committed (or started): its running time is counted from commit to commit. */
  committedAt: number;
  finished: Promise<void>;
}

export class JobManager {
  private readonly running = new Map<string, Running>();
  private closed = false;

  constructor(private readonly host: JobHost) {}

  /** Checks the request, lists its items, records the job and starts it; answers at once. */
  async start(raw: unknown, actor: string | null): Promise<JobInfo> {
    if (this.closed) throw tgError('SHUTTING_DOWN', 'the server is stopping');
    const parsed = JobSpecSchema.safeParse(raw);
    if (!parsed.success)
      throw tgError(
        'BAD_PARAMETER',
        `the job is not valid: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`,
      );
    const spec = parsed.data;
    const target = resolveTarget(spec, this.host);
    const results = checkResultsPath(spec.results, this.host.allowedRoots, spec.overwrite);
    const tensorPaths = Object.fromEntries(
      (target.outputRows ?? []).map(({ name }) => [
        name,
        checkResultsPath(tensorPath(results, name), this.host.allowedRoots, spec.overwrite, 'tensors'),
      ]),
    );
    const items = 'rows' in spec.items ? [] : await listItems(spec.items, this.host.allowedRoots);
    const total = target.rows ? (target.rows.layout.shape[0] as number) : items.length;
    if (total === 0)
      throw tgError('BAD_PARAMETER', 'the job has no items: the array has no rows', { parameter: 'items' });
    const now = new Date().toISOString();
    const record = {
      id: randomUUID(),
      spec: { ...spec, results },
      items,
      state: 'running' as const,
      progress: {
        items: total,
        done: 0,
        failed: 0,
        errors: {},
        results_bytes: Buffer.byteLength(resultsFormat(results).header),
        ...(target.outputRows ? { tensors: tensorPaths } : {}),
      },
      error: null,
      createdAt: now,
      createdBy: actor,
      updatedAt: now,
    };
    // Created (emptied when overwriting) before the job is recorded: a resume finds it there. A
    // Parquet job commits to its lines file; the results file it replaces goes now, not at the end.
    try {
      const roots = this.host.allowedRoots;
      if (endLinesPathOf(results)) removeResultsFile(results, roots);
      const fd = openResultsFile(linesPathOf(results), roots, 'create');
      try {
        writeAll(fd, Buffer.from(resultsFormat(results).header), 0);
      } finally {
        closeSync(fd);
      }
      if (target.outputRows)
        new TensorFiles(target.outputRows, results, total, 0, true, (path, how) =>
          openResultsFile(path, roots, how, 'tensors'),
        ).close();
    } catch (err) {
      throw diskError(err, results, 'start');
    }
    await this.host.store.createJob(record);
    this.launch(record, { ...spec, results });
    return this.info(record);
  }

  async get(id: string): Promise<JobInfo> {
    const live = this.running.get(id);
    if (live) return this.live(live);
    return this.info(await this.recorded(id, false));
  }

  async list(): Promise<JobInfo[]> {
    const records = await this.host.store.listJobs(false);
    return records.map((r) => {
      const live = this.running.get(r.id);
      return live ? this.live(live) : this.info(r);
    });
  }

  /** Stops a running or paused job: requests in flight are withdrawn, what is committed stays. */
  async cancel(id: string): Promise<JobInfo> {
    const live = this.running.get(id);
    if (!live) {
      const record = await this.recorded(id, false); // JOB_NOT_FOUND when unknown
      if (record.state === 'paused') {
        // A Parquet job's file is written from what was committed; if even that fails, the lines stay.
        const { results } = JobSpecSchema.parse(record.spec);
        const error = await this.writeFinalResults(results);
        const why = error
          ? `${error.code}: the Parquet results could not be written (${error.message}); the committed lines are in ${linesPathOf(results)}`
          : record.error;
        await this.host.store.updateJob(id, 'cancelled', record.progress, why);
        if (!error) removeEndLines(results, this.host.allowedRoots);
      }
      return this.get(id); // a finished job stays as it finished
    }
    live.stopping ??= 'cancel';
    live.abort.abort();
    await live.finished;
    return this.get(id);
  }

  /** Runs a paused job on from its last commit (once its cause, a full disk, is fixed). */
  async resume(id: string): Promise<JobInfo> {
    if (this.closed) throw tgError('SHUTTING_DOWN', 'the server is stopping');
    const record = this.running.has(id) ? undefined : await this.recorded(id, true);
    if (record?.state !== 'paused' || this.running.has(id))
      throw tgError(
        'JOB_NOT_PAUSED',
        `job ${id} is ${record?.state ?? 'running'}; only a paused job resumes (get_job says why it stopped)`,
        { job: id },
      );
    const spec = JobSpecSchema.parse(record.spec);
    const progress = record.progress as JobProgress;
    this.host.log('resuming a paused batch job', {
      level: 'info',
      job: id,
      done: progress.done,
      items: progress.items,
    });
    const job = this.launch({ ...record, progress, state: 'running', error: null }, spec);
    await this.host.store.updateJob(id, 'running', progress, null);
    return this.live(job);
  }

  /** Answers once the job stops running in this process: finished, paused, or the server stopping. */
  async settled(id: string): Promise<JobInfo> {
    await this.running.get(id)?.finished;
    return this.get(id);
  }

  /** Calls `listener` with the job after each of its commits; returns what stops that. */
  watch(id: string, listener: (job: JobInfo) => void): () => void {
    const live = this.running.get(id);
    live?.listeners.add(listener);
    return () => live?.listeners.delete(listener);
  }

  /** The jobs running in this process, with their pace: what the dashboard and `top` show. */
  runningJobs(): JobInfo[] {
    return [...this.running.values()].map((job) => this.live(job));
  }

  /** The model or workflow a job runs, for access checks. */
  async targetOf(id: string): Promise<{ model?: string; workflow?: string }> {
    const { model, workflow } = this.running.get(id)?.spec ?? ((await this.recorded(id, false)).spec as JobSpec);
    return model !== undefined ? { model } : { workflow: workflow as string };
  }

  private async recorded(id: string, withItems: boolean): Promise<JobRecord> {
    const record = (await this.host.store.listJobs(withItems)).find((j) => j.id === id);
    if (!record) throw tgError('JOB_NOT_FOUND', `no job "${id}" is recorded; list_jobs lists them`, { job: id });
    return record;
  }

  /**
   * At start-up: every job recorded as running (the server stopped or died under it) goes on.
   * Paused ones wait for resume_job: what paused them needs someone to fix it.
   */
  async resumeInterrupted(): Promise<void> {
    for (const record of await this.host.store.listJobs(true)) {
      if (record.state !== 'running' || this.running.has(record.id)) continue;
      const spec = JobSpecSchema.parse(record.spec);
      const progress = record.progress as JobProgress;
      this.host.log('resuming a batch job', {
        level: 'info',
        job: record.id,
        target: spec.model ?? spec.workflow,
        done: progress.done,
        items: progress.items,
      });
      this.launch({ ...record, progress, state: 'running' }, spec);
    }
  }

  /** Stops every job for a shutdown: they stay recorded as running and resume at the next start. */
  async close(): Promise<void> {
    this.closed = true;
    const live = [...this.running.values()];
    for (const job of live) {
      job.stopping ??= 'shutdown';
      job.abort.abort();
    }
    await Promise.all(live.map((j) => j.finished));
  }

  private launch(record: Running['record'], spec: JobSpec): Running {
    const job: Running = {
      record,
      spec,
      abort: new AbortController(),
      startedAt: performance.now(),
      doneAtStart: record.progress.done,
      committedAt: performance.now(),
      finished: Promise.resolve(),
      inFlightItems: 0,
      requestSize: 1,
      listeners: new Set(),
    };
    this.running.set(record.id, job);
    job.finished = this.run(job)
      .catch((err) => {
        const error = asTensorgateError(err);
        job.stopping = error.code === 'DISK_FULL' ? { paused: error } : { failed: error.message };
      })
      .then(() => this.finish(job));
    return job;
  }

  private async finish(job: Running): Promise<void> {
    if (job.stopping !== 'shutdown' && !(typeof job.stopping === 'object' && 'paused' in job.stopping)) {
      const error = await this.writeFinalResults(job.spec.results);
      if (error) job.stopping = error.code === 'DISK_FULL' ? { paused: error } : { failed: error.message };
    }
    this.running.delete(job.record.id);
    const { stopping } = job;
    if (stopping === 'shutdown') return; // resumed at the next start
    const state: JobState =
      stopping === undefined
        ? 'completed'
        : stopping === 'cancel'
          ? 'cancelled'
          : 'paused' in stopping
            ? 'paused'
            : 'failed';
    const error =
      typeof stopping !== 'object'
        ? null
        : 'paused' in stopping
          ? `${stopping.paused.code}: ${stopping.paused.message}`
          : stopping.failed;
    job.record.state = state;
    job.record.error = error;
    try {
      await this.host.store.updateJob(job.record.id, state, job.record.progress, error);
    } catch (err) {
      this.host.log('could not record the end of a batch job', {
        level: 'error',
        job: job.record.id,
        error: (err as Error).message,
      });
    }
    if (state !== 'paused') removeEndLines(job.spec.results, this.host.allowedRoots);
    this.host.log(`batch job ${state}`, {
      level: state === 'failed' ? 'error' : state === 'paused' ? 'warn' : 'info',
      job: job.record.id,
      target: job.spec.model ?? job.spec.workflow,
      done: job.record.progress.done,
      failed: job.record.progress.failed,
      ...(error ? { error } : {}),
    });
  }

  /**
   * Writes a Parquet job's results file from its committed lines, when it completes, fails or is
   * cancelled; answers what went wrong, if anything. A full disk pauses a running job instead
   * (resume_job writes the file again once there is room); a crash before the end is recorded
   * writes it again at the resume.
   */
  private async writeFinalResults(results: string): Promise<TensorgateError | undefined> {
    const linesPath = endLinesPathOf(results);
    if (linesPath === undefined) return undefined;
    try {
      const roots = this.host.allowedRoots;
      await writeParquetResults(linesPath, results, roots);
      return undefined;
    } catch (err) {
      return diskError(err, results, 'commit');
    }
  }

  /**
   * Runs the items after the last committed one, `lanes` requests at a time, each sized to
   * `max_pass_ms` (resize()), committing in item order. While the model has interactive traffic
   * (a call that is not a job's in the last second), the job steps back to one item at a time,
   * sent once the model has had no such call in flight for QUIET_MS (or after STARVE_MS): an
   * interactive call waits behind at most one item's forward pass, and calls that come back to
   * back mostly behind none.
   */
  private async run(job: Running): Promise<void> {
    const { spec, record } = job;
    const target = resolveTarget(spec, this.host);
    const format = resultsFormat(spec.results);
    const total = target.rows ? (target.rows.layout.shape[0] as number) : record.items.length;
    if (total !== record.progress.items)
      throw tgError(
        'BAD_PARAMETER',
        `the job's items changed since it started: ${total} rows, where it had ${record.progress.items}`,
      );
    const itemsAt = (start: number, count: number): string[] =>
      target.rows
        ? Array.from({ length: Math.min(count, total - start) }, (_, k) => `${target.rows?.label}[${start + k}]`)
        : record.items.slice(start, start + count);
    const { batch, lanes } = target;
    const progress = record.progress;
    // Checked at every (re)start: a link there may have been pointed elsewhere since.
    const fd = openResultsFile(linesPathOf(spec.results), this.host.allowedRoots, 'update');
    let tensors: TensorFiles | undefined;
    try {
      // Anything after the last commit was written by a run that did not get to record it.
      if (fstatSync(fd).size !== progress.results_bytes) ftruncateSync(fd, progress.results_bytes);
      if (target.outputRows)
        tensors = new TensorFiles(target.outputRows, spec.results, total, progress.done, false, (path, how) =>
          openResultsFile(path, this.host.allowedRoots, how, 'tensors'),
        );
      /** Finished requests by their first item, waiting for the ones before them. */
      const ready = new Map<number, Answered>();
      let cursor = progress.done;
      let inFlight = 0;
      let committing = Promise.resolve();
      const commit = async (): Promise<void> => {
        while (ready.has(progress.done)) {
          const { lines, rows } = ready.get(progress.done) as Answered;
          ready.delete(progress.done);
          const text = Buffer.from(lines.map(format.line).join(''));
          try {
            writeAll(fd, text, progress.results_bytes);
            fsyncSync(fd);
            tensors?.append(progress.done, rows);
          } catch (err) {
            // Nothing of this request counts as done: a resume cuts what did get written.
            const error = diskError(err, spec.results, 'commit');
            if (error.code === 'DISK_FULL') job.stopping ??= { paused: error };
            job.abort.abort();
            throw error;
          }
          progress.results_bytes += text.byteLength;
          progress.done += lines.length;
          for (const line of lines)
            if (line.error) {
              const { code } = line.error;
              progress.failed += 1;
              progress.errors[code] = (progress.errors[code] ?? 0) + 1;
              progress.failed_items ??= {};
              const kept = progress.failed_items[code] ?? [];
              if (kept.length < FAILED_ITEMS_KEPT) progress.failed_items[code] = [...kept, line.item];
            }
          const now = performance.now();
          progress.run_seconds = roundSignificant((progress.run_seconds ?? 0) + (now - job.committedAt) / 1000, 6);
          job.committedAt = now;
          await this.host.store.updateJob(record.id, 'running', progress, null);
          for (const listener of job.listeners) listener(this.live(job));
          if (spec.max_failures !== undefined && progress.failed > spec.max_failures) {
            job.stopping ??= {
              failed: `${progress.failed} items failed, over the job's max_failures of ${spec.max_failures} (${describeErrors(progress.errors)})`,
            };
            job.abort.abort();
          }
        }
      };
      let sentAt = performance.now();
      const busy = () => target.models.some((m) => this.host.interactiveQuietMs(m) < QUIET_MS);
      const lane = async (): Promise<void> => {
        while (!job.abort.signal.aborted && cursor < total) {
          const yielding = target.models.some((m) => this.host.interactiveSince(m, INTERACTIVE_MS));
          if (yielding && (inFlight > 0 || (busy() && performance.now() - sentAt < STARVE_MS))) {
            await new Promise((resolve) => setTimeout(resolve, YIELD_POLL_MS));
            continue;
          }
          sentAt = performance.now();
          const start = cursor;
          const items = itemsAt(start, yielding ? 1 : Math.min(batch, job.requestSize));
          cursor += items.length;
          inFlight++;
          job.inFlightItems += items.length;
          let answered: Answered;
          try {
            answered = await this.runChunk(job, target, start, items);
          } finally {
            inFlight--;
            job.inFlightItems -= items.length;
          }
          if (job.abort.signal.aborted) return; // withdrawn: not committed
          ready.set(start, answered);
          committing = committing.then(commit);
          await committing;
        }
      };
      const results = await Promise.allSettled(Array.from({ length: lanes }, lane));
      await committing;
      const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failure && !job.abort.signal.aborted) throw failure.reason;
    } finally {
      closeSync(fd);
      tensors?.close();
    }
  }

  /** One request's result lines (and output rows): one request for all its items; on an item's error, each alone. */
  private async runChunk(job: Running, target: Target, start: number, items: string[]): Promise<Answered> {
    try {
      const { answers, rows } = await this.request(job, target, start, items);
      return { lines: items.map((item, k) => ({ index: start + k, item, ...answers[k] })), rows };
    } catch (err) {
      const error = asTensorgateError(err);
      if (job.abort.signal.aborted) return { lines: [], rows: [] };
      if (!ITEM_ERRORS.has(error.code)) throw error;
      if (items.length === 1)
        return { lines: [{ index: start, item: items[0] as string, error: describe(error) }], rows: [undefined] };
      const alone = await Promise.all(items.map((item, k) => this.runChunk(job, target, start + k, [item])));
      return { lines: alone.flatMap((a) => a.lines), rows: alone.flatMap((a) => a.rows) };
    }
  }

  private async request(
    job: Running,
    target: Target,
    start: number,
    items: string[],
  ): Promise<{ answers: Record<string, unknown>[]; rows: ItemRows[] }> {
    const options: InferOptions = { signal: job.abort.signal, adapter: 'job', keepOutputs: false };
    const inputs = { [target.input]: items };
    // With tensors: the rows go to the .npy files, whole, and leave the lines.
    const answered = (answers: Record<string, unknown>[], tensors: NamedTensor[]) => {
      if (!target.outputRows) return { answers, rows: [] };
      const rows = rowsOfItems(target.outputRows, tensors, items.length);
      return { answers: answers.map(({ outputs: _o, embedding: _e, ...rest }) => rest), rows };
    };
    for (let attempt = 0; ; attempt++) {
      try {
        if (target.kind === 'workflow')
          return { answers: [workflowAnswer(await this.host.runWorkflow(target.name, inputs, options))], rows: [] };
        if (target.rows) {
          const { file, layout } = target.rows;
          const result = await this.host.inferTensors(
            {
              model: target.name,
              ...(job.spec.version ? { version: job.spec.version } : {}),
              inputs: new Map([[target.input, fileRowsSource(file, layout, start, items.length)]]),
              form: 'path',
            },
            options,
          );
          this.resize(job, result, items.length);
          const answers = items.map((_, k) => ({
            outputs: Object.fromEntries(result.outputs.map(({ name, tensor }) => [name, rowOf(tensor, k)])),
          }));
          return answered(answers, result.outputs);
        }
        const result = await this.host.infer(
          { model: target.name, ...(job.spec.version ? { version: job.spec.version } : {}), inputs },
          options,
        );
        this.resize(job, result, items.length);
        return answered(
          items.map((_, k) => answerOf(result, k)),
          result.tensors ?? [],
        );
      } catch (err) {
        const error = asTensorgateError(err);
        const pause = RETRY_MS[attempt];
        if (job.abort.signal.aborted || !TRANSIENT_ERRORS.has(error.code) || pause === undefined) throw error;
        this.host.log('a batch job request failed; trying it again', {
          level: 'warn',
          job: job.record.id,
          code: error.code,
          attempt: attempt + 1,
        });
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
    }
  }

  /**
   * Sizes the job's next request by the pass that answered this one: as many items as the model
   * gets through in `max_pass_ms` at that pace, so an interactive call arriving at any moment
   * waits at most about that long for the pass in progress. At most twice the last size (a job
   * starts at one item and finds its size in a few requests), never over its batch. A fast model
   * on a GPU runs full batches; a slow one on a CPU, where a batch saves little, small ones.
   */
  private resize(job: Running, result: Pick<InferenceResult, 'timings' | 'batch_size'>, items: number): void {
    const t = result.timings;
    // Summed for the job's summary: where its time went, per item.
    const stages = job.record.progress.stages ?? { items: 0, ms: {} };
    job.record.progress.stages = stages;
    stages.items += items;
    for (const [key, ms] of Object.entries(t)) {
      const stage = key.replace(/_ms$/, '');
      if (stage !== 'total' && typeof ms === 'number') stages.ms[stage] = (stages.ms[stage] ?? 0) + ms;
    }
    const passMs = (t.preprocess_ms ?? 0) + t.transfer_ms + t.compute_ms + (t.postprocess_ms ?? 0);
    const perRow = Math.max(passMs, 0.001) / Math.max(1, result.batch_size);
    const fit = Math.max(1, Math.floor((job.spec.max_pass_ms ?? DEFAULT_PASS_MS) / perRow));
    job.requestSize = Math.min(fit, job.requestSize * 2);
  }

  private live(job: Running): JobInfo {
    const info = { ...this.info(job.record), in_flight: job.inFlightItems };
    const seconds = (performance.now() - job.startedAt) / 1000;
    const done = job.record.progress.done - job.doneAtStart;
    if (seconds > 0 && done > 0) {
      const rate = done / seconds;
      info.items_per_second = roundSignificant(rate, 3);
      info.eta_s = Math.round((job.record.progress.items - job.record.progress.done) / rate);
    }
    return info;
  }

  private info(
    record: Pick<JobRecord, 'id' | 'spec' | 'state' | 'progress' | 'error' | 'createdAt' | 'createdBy' | 'updatedAt'>,
  ): JobInfo {
    const spec = record.spec as JobSpec;
    const progress = record.progress as JobProgress;
    return {
      id: record.id,
      ...(spec.model !== undefined ? { model: spec.model } : { workflow: spec.workflow as string }),
      ...(spec.version ? { version: spec.version } : {}),
      state: record.state as JobState,
      results: spec.results,
      items: progress.items,
      done: progress.done,
      failed: progress.failed,
      errors: progress.errors,
      ...(progress.tensors ? { tensors: progress.tensors } : {}),
      ...(progress.failed_items ? { failed_items: progress.failed_items } : {}),
      ...(progress.run_seconds && progress.done
        ? { items_per_second: roundSignificant(progress.done / progress.run_seconds, 3) }
        : {}),
      ...(progress.stages?.items
        ? {
            ms_per_item: Object.fromEntries(
              Object.entries(progress.stages.ms).map(([stage, ms]) => [
                stage,
                roundSignificant(ms / (progress.stages?.items ?? 1), 3),
              ]),
            ),
          }
        : {}),
      ...(record.error ? { error: record.error } : {}),
      created_at: record.createdAt,
      created_by: record.createdBy,
      updated_at: record.updatedAt,
    };
  }
}

/**
 * The lines file of a format written at the end goes once the job's end is recorded (it is in the
 * table). One no longer under the allowed roots (the server restarted with others) is left there.
 */
function removeEndLines(results: string, roots: string[]): void {
  const linesPath = endLinesPathOf(results);
  if (linesPath === undefined) return;
  try {
    removeResultsFile(linesPath, roots);
  } catch (err) {
    if ((err as { code?: string }).code !== 'PATH_NOT_ALLOWED') throw err;
  }
}

/** ENOSPC, EDQUOT and EFBIG (the file at its size limit) as DISK_FULL; any other write error as it is. */
function diskError(err: unknown, path: string, when: 'start' | 'commit'): TensorgateError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC' || code === 'EDQUOT' || code === 'EFBIG')
    return tgError(
      'DISK_FULL',
      when === 'start'
        ? `the results file ${path} cannot be written (${code}): free space, then start the job again`
        : `the results file ${path} cannot grow (${code}): the job is paused at its last commit; free space, then resume_job`,
      { path },
    );
  return asTensorgateError(err);
}

function describe(error: TensorgateError): { code: string; message: string } {
  return { code: error.code, message: error.message };
}

function describeErrors(errors: Record<string, number>): string {
  return Object.entries(errors)
    .map(([code, n]) => `${code} ${n}`)
    .join(', ');
}
