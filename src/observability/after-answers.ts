/**
 * Work every answered request needs but its caller does not wait for: the Prometheus metrics, the
 * request window, the request log and the traces of a request that finished or failed.
 *
 * It used to run inside the request, between the worker's answer and the adapter's reply, so every
 * call's latency carried it: 13 µs of the gateway's thread per request, warm in one process, with
 * the request log on (docs/architecture.md#after-the-answer). Queued here, it runs in the event
 * loop's check phase (`setImmediate`), after the adapter has encoded its reply and handed it to the
 * socket in the same turn; under load, one turn's answered requests are recorded together. Where
 * the reply was sent from another phase (a timer's), the next request may be read first: readers
 * of the records flush the queue before they read (Gateway.window, /metrics).
 *
 * Nothing queued is lost: a task that throws is reported and the others still run, and `flush()`
 * runs what is left at once (the gateway's close, before the request log is flushed at exit).
 */
export class AfterAnswers {
  private queue: (() => void)[] = [];
  private scheduled = false;

  constructor(private readonly onError: (err: unknown) => void) {}

  /** Runs `task` once the current turn of the event loop is done. */
  add(task: () => void): void {
    this.queue.push(task);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.onTurn);
    }
  }

  /** Tasks waiting to run. */
  get pending(): number {
    return this.queue.length;
  }

  /**
   * The scheduled run. A flush by a reader in between leaves it scheduled, so tasks added after
   * that flush still run on it, and no second turn is asked for.
   */
  private readonly onTurn = (): void => {
    this.scheduled = false;
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
