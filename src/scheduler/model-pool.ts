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

/**
 * The instances of one model version and the FIFO queue in front of them. Each instance runs one
 * request at a time, so the time a request waits here is its queue time, measured honestly. A
 * crashed instance fails only the request it was running; it is replaced and the queue goes on.
 */

export type PoolState = 'loading' | 'ready' | 'failed' | 'closed';

interface Job {
  request: EngineRequest;
  enqueuedAt: number;
  resolve: (r: PooledResponse) => void;
  reject: (e: TensorgateError) => void;
}

export interface PooledResponse extends EngineResponse {
  queueMs: number;
  instance: string;
}

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

  get stats(): { instances: number; busy: number; queued: number; restarts: number } {
    return {
      instances: this.slots.length,
      busy: this.slots.filter((s) => s.busy).length,
      queued: this.queue.length,
      restarts: this.restarts,
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
      this.queue.push({ request, enqueuedAt: performance.now(), resolve, reject });
      this.drain();
    });
  }

  async close(): Promise<void> {
    this.stateValue = 'closed';
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
      const job = this.queue.shift() as Job;
      this.run(slot, job);
    }
  }

  private run(slot: Slot, job: Job): void {
    slot.busy = true;
    const queueMs = performance.now() - job.enqueuedAt;
    slot.instance
      .infer(job.request)
      .then(
        (response) => job.resolve({ ...response, queueMs, instance: slot.instance.label }),
        (err) => job.reject(asTensorgateError(err)),
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
