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
import { batchKey, batchRows, joinRequests, splitResponse } from './batch.js';

/**
 * The instances of one model version and the FIFO queue in front of them. Each instance runs one
 * forward pass at a time, so the time a request waits here is its queue time, measured honestly.
 * With `batching` configured, compatible queued requests are joined into one forward pass (see
 * batch.ts). A crashed instance fails only what it was running; it is replaced and the queue goes on.
 */

export type PoolState = 'loading' | 'ready' | 'failed' | 'closed';

interface Job {
  request: EngineRequest;
  enqueuedAt: number;
  /** Rows along dimension 0, or undefined when the request cannot join a batch. */
  rows: number | undefined;
  key: string;
  /** Run alone: set when a batch it was in failed, so that only the bad request fails again. */
  solo: boolean;
  resolve: (r: PooledResponse) => void;
  reject: (e: TensorgateError) => void;
}

export interface PooledResponse extends EngineResponse {
  queueMs: number;
  instance: string;
  /** Rows in the forward pass that served this request (its own and those it was batched with). */
  batchSize: number;
}

/** Errors caused by one request's data: a batch that fails with one is retried request by request. */
const PER_REQUEST_ERRORS = new Set(['INFERENCE_FAILED', 'BAD_TENSOR', 'FILE_NOT_FOUND']);

export interface PoolOptions {
  maxQueue: number;
  onLog?: (line: string) => void;
}

interface Slot {
  instance: EngineInstance;
  busy: boolean;
  ready: boolean;
}

export class ModelPool {
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private stateValue: PoolState = 'loading';
  private failure: TensorgateError | undefined;
  private loadInfoValue: LoadInfo | undefined;
  private restarts = 0;
  private batchTimer: NodeJS.Timeout | undefined;
  /** Forward passes by number of rows: how well batching works. */
  private readonly batchSizes = new Map<number, number>();

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

  get stats(): { instances: number; busy: number; queued: number; restarts: number; batches: Record<string, number> } {
    return {
      instances: this.slots.length,
      busy: this.slots.filter((s) => s.busy).length,
      queued: this.queue.length,
      restarts: this.restarts,
      batches: Object.fromEntries([...this.batchSizes].sort((a, b) => a[0] - b[0])),
    };
  }

  /** Starts every instance (load + warm-up); the pool is ready when all are. */
  async start(): Promise<LoadInfo> {
    const count = this.spec.config.resources.instances;
    try {
      const infos = await Promise.all(Array.from({ length: count }, (_, i) => this.startSlot(i)));
      this.loadInfoValue = infos[0] as LoadInfo;
      this.stateValue = 'ready';
      this.drain();
      return this.loadInfoValue;
    } catch (err) {
      this.failure = asTensorgateError(err);
      this.stateValue = 'failed';
      await Promise.allSettled(this.slots.map((s) => s.instance.close()));
      this.failQueue(this.failure);
      throw this.failure;
    }
  }

  infer(request: EngineRequest): Promise<PooledResponse> {
    if (this.stateValue === 'failed' && this.failure) return Promise.reject(this.failure);
    if (this.stateValue === 'closed') return Promise.reject(tgError('SHUTTING_DOWN', 'the server is stopping'));
    if (this.queue.length >= this.options.maxQueue) {
      return Promise.reject(
        tgError(
          'QUEUE_FULL',
          `${this.spec.config.name}@${this.spec.version} has ${this.queue.length} requests waiting; retry shortly`,
          { queued: this.queue.length, maxQueue: this.options.maxQueue },
        ),
      );
    }
    return new Promise((resolve, reject) => {
      const rows = batchRows(request);
      const key = this.spec.config.batching && rows !== undefined ? batchKey(request) : '';
      this.queue.push({ request, enqueuedAt: performance.now(), rows, key, solo: false, resolve, reject });
      this.drain();
    });
  }

  async close(): Promise<void> {
    this.stateValue = 'closed';
    clearTimeout(this.batchTimer);
    this.failQueue(tgError('SHUTTING_DOWN', 'the server is stopping'));
    await Promise.allSettled(this.slots.map((s) => s.instance.close()));
  }

  private async startSlot(index: number): Promise<LoadInfo> {
    const instance = this.engine.createInstance(this.spec, index);
    const slot: Slot = { instance, busy: false, ready: false };
    this.slots[index] = slot;
    instance.onCrash((err) => this.onCrash(index, err));
    const info = await instance.start();
    slot.ready = true;
    return info;
  }

  private drain(): void {
    if (this.stateValue !== 'ready') return;
    for (const slot of this.slots) {
      if (this.queue.length === 0) return;
      if (slot.busy || !slot.ready) continue;
      const jobs = this.takeBatch();
      if (!jobs) return; // The head waits a little longer for company; a timer calls drain again.
      this.run(slot, jobs);
    }
  }

  /**
   * The jobs for the next forward pass: the head of the queue, plus, when batching, every queued
   * job with the same key that still fits. Undefined while the head may still wait for others.
   */
  private takeBatch(): Job[] | undefined {
    const head = this.queue[0] as Job;
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
    const full = rows === batching.max_batch_size || batching.preferred_batch_sizes.includes(rows);
    const waitedUs = (performance.now() - head.enqueuedAt) * 1000;
    if (!full && waitedUs < batching.max_queue_delay_us) {
      this.batchTimer ??= setTimeout(
        () => {
          this.batchTimer = undefined;
          this.drain();
        },
        Math.max(1, (batching.max_queue_delay_us - waitedUs) / 1000),
      );
      return undefined;
    }
    const taken = new Set(members);
    this.queue.splice(0, this.queue.length, ...this.queue.filter((j) => !taken.has(j)));
    return members;
  }

  private run(slot: Slot, jobs: Job[]): void {
    slot.busy = true;
    const started = performance.now();
    const rows = jobs.map((j) => j.rows ?? 1);
    const batchSize = jobs.length === 1 ? (jobs[0]?.rows ?? 1) : rows.reduce((a, b) => a + b, 0);
    slot.instance
      .infer(joinRequests(jobs.map((j) => j.request)))
      .then(
        (response) => {
          this.batchSizes.set(batchSize, (this.batchSizes.get(batchSize) ?? 0) + 1);
          let parts: EngineResponse[];
          try {
            parts = jobs.length === 1 ? [response] : splitResponse(response, rows);
          } catch (err) {
            for (const job of jobs) job.reject(asTensorgateError(err));
            return;
          }
          jobs.forEach((job, i) => {
            const part = parts[i] as EngineResponse;
            job.resolve({ ...part, queueMs: started - job.enqueuedAt, instance: slot.instance.label, batchSize });
          });
        },
        (err) => {
          const error = asTensorgateError(err);
          if (jobs.length > 1 && PER_REQUEST_ERRORS.has(error.code)) {
            // One request's data broke the batch: run each alone so only that one fails.
            for (const job of jobs) job.solo = true;
            this.queue.unshift(...jobs);
            return;
          }
          for (const job of jobs) job.reject(error);
        },
      )
      .finally(() => {
        slot.busy = false;
        this.drain();
      });
  }

  private onCrash(index: number, err: Error): void {
    const slot = this.slots[index];
    if (!slot || this.stateValue === 'closed') return;
    slot.ready = false;
    if (this.stateValue !== 'ready') return; // A crash during start fails start() itself.
    this.restarts += 1;
    this.options.onLog?.(`${slot.instance.label} crashed (${err.message}); restarting`);
    this.startSlot(index)
      .then(() => this.drain())
      .catch((restartErr) => {
        this.options.onLog?.(`${slot.instance.label} could not restart: ${(restartErr as Error).message}`);
        if (this.slots.every((s) => !s.ready)) {
          this.failure = asTensorgateError(restartErr);
          this.stateValue = 'failed';
          this.failQueue(this.failure);
        }
      });
  }

  private failQueue(err: TensorgateError): void {
    for (const job of this.queue.splice(0)) job.reject(err);
  }
}
