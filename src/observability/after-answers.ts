/** Long enough that steady traffic makes its records while it waits for workers; short for a reader of the log. */
const DEFAULT_IDLE_MS = 5;

/**
 * Work every answered request needs but its caller does not wait for: the Prometheus metrics, the
 * request window, the request log and the traces of a request that finished or failed.
 *
 * It used to run inside the request, between the worker's answer and the adapter's reply, so every
 * call's latency carried it (docs/architecture.md#after-the-answer). Then it ran in the check phase
 * right after the reply, which took it out of that call but not out of the next one: on a host
 * where the client shares a core with the gateway, the client reads its answer and sends its next
 * request while the gateway's thread is off that core, and the queued work then ran before the
 * gateway read that request.
 *
 * So it is made when the gateway next has nothing to do: the moment it has handed a request to a
 * worker and waits for the answer (`whileWaiting`), the forward pass running on another core
 * meanwhile. Under load every request sent makes what the ones before it queued. When no request
 * follows, a timer makes it within `idleMs`. Readers of the records flush the queue before they
 * read (Gateway.window, /metrics), so nothing is read stale for the wait.
 *
 * Nothing queued is lost: a task that throws is reported and the others still run, and `flush()`
 * runs what is left at once (the gateway's close, before the request log is flushed at exit).
 */
export class AfterAnswers {
  private queue: (() => void)[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly onError: (err: unknown) => void,
    /** The longest a task waits for a request to be sent before a timer makes it. */
    private readonly idleMs = DEFAULT_IDLE_MS,
  ) {}

  /** Queues `task`, to run when the gateway next waits for a worker, or after `idleMs`. */
  add(task: () => void): void {
    this.queue.push(task);
    // One timer at a time: a flush in between leaves it armed, and it then finds nothing or
    // later tasks. It must not keep an idle process alive; closing the gateway flushes.
    if (!this.timer) this.timer = setTimeout(this.onTimer, this.idleMs).unref();
  }

  /**
   * The gateway has sent a request on and has nothing to do until its answer: what is queued is
   * made now, off every request's path.
   */
  whileWaiting(): void {
    if (this.queue.length > 0) this.flush();
  }

  /** Tasks waiting to run. */
  get pending(): number {
    return this.queue.length;
  }

  private readonly onTimer = (): void => {
    this.timer = undefined;
    this.flush();
  };

  /** Runs every queued task now, in the order they were added. */
  flush(): void {
    const tasks = this.queue;
    this.queue = [];
    for (const task of tasks) {
      try {
        task();
      } catch (err) {
        this.onError(err);
      }
    }
  }
}
