import { performance } from 'node:perf_hooks';
import type {
  Engine,
  EngineInstance,
  EngineRequest,
  EngineResponse,
  LoadInfo,
  ModelVersionSpec,
} from '../engines/engine.js';
import { asTensorgateError, type TensorgateError, tgError } from '../errors.js';
import type { Logger } from '../observability/logger.js';
import { batchKey, batchRows, joinRequests, splitResponse } from './batch.js';
import { Job } from './job.js';

/**
 * The instances of one model version and the FIFO queue in front of them. Each instance runs one
 * forward pass at a time, so the time a request waits here is its queue time, measured honestly.
 * With `batching` configured, compatible queued requests are joined into one forward pass (see
 * batch.ts). An instance with a pipeline (EngineInstance.pipelineDepth) whose passes are short
 * (PIPELINE_MAX_PASS_MS) is sent its next pass while it runs one, once no instance is idle: it then
 * starts that pass as soon as it answers the last, instead of waiting a round trip for the
 * gateway. Only work that would not be better off waiting goes ahead like this: a single request,
 * or a full batch, and never a batch job's request (interactive requests go ahead of those in the
 * queue, and must not find them in a pipeline). The time a pass waits in the pipeline behind
 * another counts as queue time, not transfer.
 *
 * Every request is answered exactly once: with its result, or with its error, its timeout or its
 * cancellation (job.ts). A crashed instance fails only what it was running (or retries it once,
 * for idempotent models) and is restarted with backoff. When one cannot load again after a few
 * tries and no other instance serves, the pool is failed with the last error instead of looping;
 * while others serve, it keeps being tried, ever more slowly, so the version gets its capacity
 * back once whatever stopped that instance passes. A restart killed by SIGKILL does not count as
 * a try: that signal comes from outside (an operator, the OOM killer), not from the model.
 */

export type PoolState = 'loading' | 'ready' | 'failed' | 'closed';

export interface PooledResponse extends EngineResponse {
  queueMs: number;
  instance: string;
  /** Rows in the forward pass that served this request (its own and those it was batched with). */
  batchSize: number;
}

export interface PoolOptions {
  /** Requests allowed to wait when the model config sets no max_queue_size. */
  maxQueue: number;
  onLog?: Logger;
}

export interface InferOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  /** A batch job's request: every other request queued after it still goes ahead of it. */
  background?: boolean;
}

interface Slot {
  instance: EngineInstance;
  /** The passes sent to the instance and not answered yet, oldest first (at most its pipelineDepth). */
  passes: Pass[];
  ready: boolean;
  /** How long its last answered pass ran, waiting in its pipeline excluded (ms). */
  lastPassMs?: number;
}

/** One forward pass sent to an instance. */
interface Pass {
  sentAt: number;
  /** When its answer (or failure) came back. */
  answeredAt?: number;
}

/** Errors caused by one request's data: a batch that fails with one is retried request by request. */
// REMOTE_ERROR: a remote endpoint that refuses a batched call may be refusing one request's data.
const PER_REQUEST_ERRORS = new Set([
  // A client's region shorter than its request says when the worker reads it (truncated since).
  'SHARED_MEMORY_OUT_OF_RANGE',
  'INFERENCE_FAILED',
  'BAD_TENSOR',
  'FILE_NOT_FOUND',
  'REMOTE_ERROR',
  // An item the worker could not decode: the rest of its batch is served without it.
  'BAD_IMAGE',
  'IMAGE_TOO_LARGE',
  'IMAGE_FORMAT_NOT_SUPPORTED',
  'BAD_TEXT',
  'TEXT_TOO_LONG',
  'BAD_AUDIO',
  'AUDIO_FORMAT_NOT_SUPPORTED',
  'AUDIO_TOO_LONG',
  'HANDLER_FAILED',
]);
/**
 * Passes longer than this are not sent ahead (ms): the round trip it saves is a small share of
 * them, and a request sent ahead can no longer be withdrawn when its caller cancels or times out,
 * so it would cost a whole pass for nothing.
 */
const PIPELINE_MAX_PASS_MS = 10;
/** Failed restarts after a crash before the pool fails, when no other instance serves. */
const MAX_RESTART_FAILURES = 3;
/** The wait before each restart attempt; the last one repeats. */
const RESTART_BACKOFF_MS = [100, 500, 2000, 5000];
/** Past MAX_RESTART_FAILURES, with other instances serving: 5 s, doubling up to a minute. */
const SLOW_RETRY_FIRST_MS = 5000;
const SLOW_RETRY_MAX_MS = 60_000;

function restartDelay(attempt: number, failures: number): number {
  if (failures >= MAX_RESTART_FAILURES)
    return Math.min(SLOW_RETRY_FIRST_MS * 2 ** (failures - MAX_RESTART_FAILURES), SLOW_RETRY_MAX_MS);
  return RESTART_BACKOFF_MS[Math.min(attempt, RESTART_BACKOFF_MS.length) - 1] as number;
}

export class ModelPool {
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private readonly running = new Set<Job>();
  private stateValue: PoolState = 'loading';
  private failure: TensorgateError | undefined;
  private loadInfoValue: LoadInfo | undefined;
  private restarts = 0;
  private batchTimer: NodeJS.Timeout | undefined;
  private drainScheduled = false;
  private idleWaiters: (() => void)[] = [];
  /** Forward passes by number of rows: how well batching works. */
  private readonly batchSizes = new Map<number, number>();
  /** Passes sent to an instance while it was still running another. */
  private pipelined = 0;
  /** Requests carried by the last forward pass: 1 means traffic too light to form batches. */
  private lastPassRequests = 1;
  /** performance.now() of the last request taken or answered: for least-recently-used unloading. */
  lastUsed = performance.now();

  constructor(
    private readonly engine: Engine,
    readonly spec: ModelVersionSpec,
    private readonly options: PoolOptions,
  ) {}

  get state(): PoolState {
    return this.stateValue;
  }

  get error(): TensorgateError | undefined {
    return this.failure;
  }

  get loadInfo(): LoadInfo | undefined {
    return this.loadInfoValue;
  }

  /** No request waiting or running. */
  get idle(): boolean {
    return this.queue.length === 0 && this.running.size === 0;
  }

  get stats(): {
    instances: number;
    pids: number[];
    busy: number;
    queued: number;
    restarts: number;
    batches: Record<string, number>;
    pipelined: number;
  } {
    return {
      instances: this.slots.length,
      pids: this.slots.flatMap((s) => (s.ready && s.instance.pid !== undefined ? [s.instance.pid] : [])),
      busy: this.slots.filter((s) => s.passes.length > 0).length,
      queued: this.queue.length,
      restarts: this.restarts,
      batches: Object.fromEntries([...this.batchSizes].sort((a, b) => a[0] - b[0])),
      pipelined: this.pipelined,
    };
  }

  private get label(): string {
    return `${this.spec.config.name}@${this.spec.version}`;
  }

  private starting: Promise<LoadInfo> | undefined;

  /** Starts every instance (load + warm-up) once; the pool is ready when all are. */
  start(): Promise<LoadInfo> {
    this.starting ??= this.startInstances();
    return this.starting;
  }

  private async startInstances(): Promise<LoadInfo> {
    const count = this.spec.config.resources.instances;
    try {
      const infos = await Promise.all(Array.from({ length: count }, (_, i) => this.startSlot(i)));
      if (this.stateValue === 'closed') throw tgError('SHUTTING_DOWN', `${this.label} was unloaded while it loaded`);
      this.loadInfoValue = infos[0] as LoadInfo;
      this.stateValue = 'ready';
      this.drain();
      return this.loadInfoValue;
    } catch (err) {
      const unloaded = this.stateValue === 'closed';
      if (!unloaded) this.fail(asTensorgateError(err));
      await Promise.allSettled(this.slots.map((s) => s.instance.close()));
      // Unloaded meanwhile (unload_model, the server stopping): its workers were stopped on
      // purpose, so what they died of is not the reason.
      if (unloaded) throw tgError('SHUTTING_DOWN', `${this.label} was unloaded while it loaded`);
      throw this.failure ?? asTensorgateError(err);
    }
  }

  infer(request: EngineRequest, options: InferOptions): Promise<PooledResponse> {
    if (this.stateValue === 'failed' && this.failure) return Promise.reject(this.failure);
    if (this.stateValue === 'closed') return Promise.reject(tgError('SHUTTING_DOWN', `${this.label} is unloaded`));
    const maxQueue = this.spec.config.max_queue_size ?? this.options.maxQueue;
    if (this.queue.length >= maxQueue) {
      return Promise.reject(
        tgError('QUEUE_FULL', `${this.label} has ${this.queue.length} requests waiting (the limit); retry shortly`, {
          queued: this.queue.length,
          maxQueue,
          retryAfterMs: 100,
        }),
      );
    }
    return new Promise((resolve, reject) => {
      const rows = batchRows(request);
      const key = this.spec.config.batching && rows !== undefined ? batchKey(request) : '';
      const job = new Job(request, rows, key, resolve, reject);
      job.arm(options.timeoutMs, options.signal, () => this.withdraw(job));
      if (job.settled) return; // Already cancelled.
      job.background = options.background === true;
      // Interactive requests go ahead of queued batch-job requests: they wait at most for what
      // is running, never for a job's backlog.
      const behind = job.background ? -1 : this.queue.findIndex((queued) => queued.background);
      if (behind < 0) this.queue.push(job);
      else this.queue.splice(behind, 0, job);
      this.lastUsed = performance.now();
      this.requestDrain();
    });
  }

  /**
   * Stops taking requests and resolves once every queued and running request has been answered,
   * or after `graceMs`, when the rest are answered SHUTTING_DOWN; then stops the instances.
   */
  async close(graceMs = 0): Promise<void> {
    if (this.stateValue === 'closed') return;
    const wasReady = this.stateValue === 'ready';
    this.stateValue = 'closed';
    if (wasReady && graceMs > 0 && !this.idle) {
      // Queued work may still be dispatched while closing: drain() runs for 'closed' pools too.
      this.drain(true);
      await Promise.race([new Promise<void>((r) => this.idleWaiters.push(r)), sleep(graceMs)]);
    }
    clearTimeout(this.batchTimer);
    const stopping = tgError('SHUTTING_DOWN', `${this.label} stopped before the request ran`);
    for (const job of [...this.queue.splice(0), ...this.running]) job.fail(stopping);
    this.running.clear();
    await Promise.allSettled(this.slots.map((s) => s.instance.close()));
  }

  private async startSlot(index: number): Promise<LoadInfo> {
    const instance = this.engine.createInstance(this.spec, index);
    const slot: Slot = { instance, passes: [], ready: false };
    this.slots[index] = slot;
    instance.onCrash((err) => this.onCrash(slot, index, err));
    const info = await instance.start();
    slot.ready = true;
    return info;
  }

  /**
   * Batching decides once per event-loop turn: requests that arrive in the same turn (a burst of
   * callers answered together and resubmitting) are seen together, so a batch is not cut in the
   * middle of a burst, and callers just answered can join the next batch. Without batching there
   * is nothing to wait for and the queue is served at once.
   */
  private requestDrain(): void {
    if (!this.spec.config.batching) {
      this.drain();
      return;
    }
    if (this.drainScheduled) return;
    this.drainScheduled = true;
    setImmediate(() => {
      this.drainScheduled = false;
      this.drain();
    });
  }

  private drain(closing = false): void {
    if (this.stateValue !== 'ready' && !(closing || this.stateValue === 'closed')) return;
    while (this.queue.length > 0) {
      const slot = this.nextSlot();
      if (!slot) break;
      const jobs = this.takeBatch(slot.passes.length > 0);
      // The head waits a little longer for company (a timer calls drain again), or for an idle instance.
      if (!jobs) break;
      this.run(slot, jobs);
    }
    if (this.idle) for (const wake of this.idleWaiters.splice(0)) wake();
  }

  /**
   * The instance for the next pass: an idle one, else one whose passes are short and whose pipeline
   * has room, the one whose oldest pass was sent first (the likeliest to be answered first);
   * undefined when none can take it.
   */
  private nextSlot(): Slot | undefined {
    let best: Slot | undefined;
    for (const slot of this.slots) {
      if (!slot.ready) continue;
      if (slot.passes.length === 0) return slot;
      if (slot.passes.length >= (slot.instance.pipelineDepth ?? 1)) continue;
      if (slot.lastPassMs === undefined || slot.lastPassMs > PIPELINE_MAX_PASS_MS) continue;
      if (!best || (slot.passes[0] as Pass).sentAt < (best.passes[0] as Pass).sentAt) best = slot;
    }
    return best;
  }

  /**
   * The jobs for the next forward pass: the head of the queue, plus, when batching, every queued
   * job with the same key that still fits. Undefined while the head may still wait for others.
   * `ahead`: the pass would wait in an instance's pipeline behind another, so only a pass that
   * cannot gain by waiting in the queue instead goes: one without batching, or a full batch; a
   * batch job's request never does.
   */
  private takeBatch(ahead: boolean): Job[] | undefined {
    const head = this.queue[0] as Job;
    if (ahead && head.background) return undefined;
    const batching = this.spec.config.batching;
    if (!batching || head.solo || head.rows === undefined || head.rows >= batching.max_batch_size) {
      return [this.queue.shift() as Job];
    }
    const members = [head];
    let rows = head.rows;
    for (const job of this.queue.slice(1)) {
      if (job.solo || job.rows === undefined || job.key !== head.key) continue;
      if (rows + job.rows > batching.max_batch_size) continue;
      members.push(job);
      rows += job.rows;
    }
    // Ahead of an instance's answer, a batch that could still grow waits for the instance instead.
    if (ahead && rows < batching.max_batch_size) return undefined;
    const full = rows === batching.max_batch_size || batching.preferred_batch_sizes.includes(rows);
    // Light traffic: the last pass carried one request and this one is alone too, so no company is
    // coming and the delay would only add latency. Any pass that carries more restores the delay.
    const alone = batching.adaptive_delay && members.length === 1 && this.lastPassRequests === 1;
    const waitedUs = (performance.now() - head.enqueuedAt) * 1000;
    if (!full && !alone && waitedUs < batching.max_queue_delay_us && this.stateValue === 'ready') {
      // Node timers fire no sooner than 1 ms (and often later): a timer alone would stretch a
      // 0.5 ms delay to 1-1.5 ms. Sleep on a timer until about 1 ms is left, then look again
      // every event-loop turn (I/O still runs in between) until the delay is up.
      const remainingMs = (batching.max_queue_delay_us - waitedUs) / 1000;
      if (remainingMs > 1.5)
        this.batchTimer ??= setTimeout(() => {
          this.batchTimer = undefined;
          this.drain();
        }, remainingMs - 1);
      else if (!this.batchTimer) this.requestDrain();
      return undefined;
    }
    const taken = new Set(members);
    this.queue.splice(0, this.queue.length, ...this.queue.filter((j) => !taken.has(j)));
    return members;
  }

  private run(slot: Slot, jobs: Job[]): void {
    this.lastPassRequests = jobs.length;
    const pass: Pass = { sentAt: performance.now() };
    // The pass this one waits behind in the instance's pipeline, if any: answered before this one.
    const behind = slot.passes.at(-1);
    if (behind) this.pipelined += 1;
    slot.passes.push(pass);
    for (const job of jobs) this.running.add(job);
    const rows = jobs.map((j) => j.rows ?? 1);
    const batchSize = jobs.length === 1 ? (jobs[0]?.rows ?? 1) : rows.reduce((a, b) => a + b, 0);
    slot.instance
      .infer(joinRequests(jobs.map((j) => j.request)))
      .then(
        (response) => {
          pass.answeredAt = performance.now();
          // Waiting in the pipeline for the pass ahead is queueing: it leaves the transfer time.
          const waited = behind?.answeredAt === undefined ? 0 : Math.max(0, behind.answeredAt - pass.sentAt);
          slot.lastPassMs = pass.answeredAt - pass.sentAt - waited;
          this.batchSizes.set(batchSize, (this.batchSizes.get(batchSize) ?? 0) + 1);
          let parts: EngineResponse[];
          try {
            parts = jobs.length === 1 ? [response] : splitResponse(response, rows);
          } catch (err) {
            for (const job of jobs) job.fail(asTensorgateError(err));
            return;
          }
          jobs.forEach((job, i) => {
            const part = parts[i] as EngineResponse;
            job.succeed({
              ...part,
              ...(waited > 0
                ? { timings: { ...part.timings, transferMs: Math.max(0, part.timings.transferMs - waited) } }
                : {}),
              queueMs: pass.sentAt - job.enqueuedAt + waited,
              instance: slot.instance.label,
              batchSize,
            });
          });
        },
        (err) => {
          pass.answeredAt = performance.now();
          this.onRunError(jobs, asTensorgateError(err));
        },
      )
      .finally(() => {
        for (const job of jobs) this.running.delete(job);
        slot.passes.splice(slot.passes.indexOf(pass), 1);
        this.lastUsed = performance.now();
        this.requestDrain();
      });
  }

  private onRunError(jobs: Job[], error: TensorgateError): void {
    const live = jobs.filter((j) => !j.settled);
    if (live.length > 1 && PER_REQUEST_ERRORS.has(error.code)) {
      // One request's data broke the batch: run each alone so only that one fails.
      for (const job of live) job.solo = true;
      this.queue.unshift(...live);
      return;
    }
    if (error.code === 'WORKER_CRASHED' && this.spec.config.idempotent && this.stateValue !== 'closed') {
      // Safe to run twice: once more, on whichever instance is ready next.
      const again = live.filter((j) => !j.retried);
      for (const job of again) job.retried = true;
      this.queue.unshift(...again);
      for (const job of live) if (!again.includes(job)) job.fail(error);
      return;
    }
    for (const job of live) job.fail(error);
  }

  /** A queued job timed out or was cancelled: take it out of the queue so it costs nothing more. */
  private withdraw(job: Job): void {
    const index = this.queue.indexOf(job);
    if (index >= 0) this.queue.splice(index, 1);
    if (this.idle) for (const wake of this.idleWaiters.splice(0)) wake();
  }

  private onCrash(slot: Slot, index: number, err: Error): void {
    // A crash during start fails start() itself, whose caller retries or gives up: restarting here
    // too would start a second worker for the same slot and orphan one of them.
    if (!slot.ready || this.slots[index] !== slot || this.stateValue === 'closed') return;
    slot.ready = false;
    if (this.stateValue !== 'ready') return;
    this.restarts += 1;
    this.options.onLog?.(`${slot.instance.label} crashed (${err.message}); restarting`, {
      level: 'warn',
      model: this.spec.config.name,
      version: this.spec.version,
    });
    this.restartSlot(index, 1, 0);
  }

  private restartSlot(index: number, attempt: number, failures: number): void {
    const timer = setTimeout(
      () => {
        if (this.stateValue !== 'ready') return;
        this.startSlot(index)
          .then(() => {
            if (this.stateValue === 'ready') {
              if (failures >= MAX_RESTART_FAILURES)
                this.options.onLog?.(`${this.label} instance ${index} is back after ${attempt} tries`, {
                  model: this.spec.config.name,
                  version: this.spec.version,
                });
              this.drain();
            } else {
              // The pool failed or was unloaded while this worker loaded: it has nothing to serve.
              void this.slots[index]?.instance.close();
            }
          })
          .catch((restartErr: unknown) => {
            if (this.stateValue !== 'ready') return;
            const error = asTensorgateError(restartErr);
            const killed = error.data.signal === 'SIGKILL';
            const failed = killed ? failures : failures + 1;
            const serving = this.slots.filter((s) => s.ready).length;
            const giveUp = failed >= MAX_RESTART_FAILURES && serving === 0;
            const next = restartDelay(attempt + 1, failed);
            const outcome = giveUp
              ? 'no instance serves, so the version fails'
              : failed >= MAX_RESTART_FAILURES
                ? `${serving} of ${this.slots.length} instances serve; trying again in ${next / 1000} s`
                : killed
                  ? 'killed from outside; trying again'
                  : 'trying again';
            this.options.onLog?.(
              `${this.label} instance ${index} could not restart (try ${attempt}): ${error.message}; ${outcome}`,
              { level: 'error', model: this.spec.config.name, version: this.spec.version },
            );
            if (giveUp) this.fail(error);
            else this.restartSlot(index, attempt + 1, failed);
          });
      },
      restartDelay(attempt, failures),
    );
    // A wait of up to a minute must not keep alive a process that has nothing else to do.
    timer.unref();
  }

  private fail(error: TensorgateError): void {
    this.failure = error;
    this.stateValue = 'failed';
    clearTimeout(this.batchTimer);
    for (const job of this.queue.splice(0)) job.fail(error);
    if (this.idle) for (const wake of this.idleWaiters.splice(0)) wake();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
