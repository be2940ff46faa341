import { performance } from 'node:perf_hooks';

/**
 * The gateway's half of spinning (docs/worker-protocol.md#spinning). A spinning worker answers
 * without being woken, but its answer still lands on a gateway asleep in epoll: the worker's
 * send pays for waking it and the gateway's answer starts only once its thread is back on a core.
 * While a request to a spinning worker is in flight, the event loop is kept turning instead
 * (setImmediate each turn, so libuv polls for I/O without blocking): the answer is read the turn
 * it arrives. Other I/O and timers run as usual in between; the price is the gateway's core busy
 * while it waits, bounded by one core whatever the number of workers, since there is one loop.
 */
export class EventLoopSpin {
  private holds = 0;
  private until = 0;
  private turning = false;
  /** Turns the loop took while held, for tests and diagnostics. */
  turns = 0;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Whether the loop is being kept turning now. */
  get spinning(): boolean {
    return this.turning;
  }

  /**
   * Keeps the loop turning until every hold is released or `ms` from now has passed, whichever
   * comes first; returns the release (calling it twice releases once).
   */
  hold(ms: number): () => void {
    this.holds++;
    this.until = Math.max(this.until, this.now() + ms);
    if (!this.turning) {
      this.turning = true;
      setImmediate(this.turn);
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.holds--;
    };
  }

  private readonly turn = (): void => {
    if (this.holds > 0 && this.now() < this.until) {
      this.turns++;
      setImmediate(this.turn);
      return;
    }
    this.turning = false;
    if (this.holds === 0) this.until = 0;
  };
}

/** The gateway's one event loop: every worker's waits share it. */
export const eventLoopSpin = new EventLoopSpin();

/** Runs `fn` after `ms`; returns the cancel. Injected by tests, setTimeout otherwise. */
export type Schedule = (fn: () => void, ms: number) => () => void;

const afterTimeout: Schedule = (fn, ms) => {
  const timer = setTimeout(fn, ms);
  return () => clearTimeout(timer);
};

export interface AnswerSpinOptions {
  /**
   * Wake before a slow answer is due (see AnswerSpin). For a model on a GPU, whose forward pass
   * leaves the host's cores waiting; on the CPU the core the gateway would turn its loop on is the
   * forward pass's (on the 2-core VM an image model's call went from 24.3 to 25.1-26.2 ms with it).
   */
  wakeEarly?: boolean;
  loop?: EventLoopSpin;
  now?: () => number;
  schedule?: Schedule;
}

/**
 * When the gateway waits for one worker's answers awake. The worker's own rule is mirrored: an
 * answer expected within `spinMs` (the previous one came that fast) is waited for awake from the
 * start. An answer expected later is waited for asleep, or, with `wakeEarly` (a GPU forward pass
 * with its copies takes longer than the default 1 ms spin), asleep until `spinMs` before it is due
 * by the previous answer's time, then awake for up to twice the spin: the wake-up the spin is
 * there to save is saved for slower models too, and the loop turns for at most `2 × spinMs` per
 * answer, however long the forward pass.
 */
export class AnswerSpin {
  private lastWaitMs: number | undefined;
  /** When the last answer came: a request sent while another was pending waits from then, not from its send. */
  private lastAnswerAt = Number.NEGATIVE_INFINITY;
  private readonly loop: EventLoopSpin;
  private readonly now: () => number;
  private readonly schedule: Schedule;
  private readonly wakeEarly: boolean;

  constructor(
    readonly spinMs: number,
    options: AnswerSpinOptions = {},
  ) {
    this.loop = options.loop ?? eventLoopSpin;
    this.now = options.now ?? (() => performance.now());
    this.schedule = options.schedule ?? afterTimeout;
    this.wakeEarly = options.wakeEarly ?? false;
  }

  /** Called as a request is sent; the function it returns, when its answer (or failure) arrives. */
  begin(): () => void {
    const started = this.now();
    const expected = this.lastWaitMs;
    let release: (() => void) | undefined;
    let cancel: (() => void) | undefined;
    if (this.spinMs > 0) {
      if (expected === undefined || expected <= this.spinMs) release = this.loop.hold(this.spinMs);
      else if (this.wakeEarly)
        cancel = this.schedule(() => {
          cancel = undefined;
          release = this.loop.hold(2 * this.spinMs);
        }, expected - this.spinMs);
    }
    return () => {
      const answeredAt = this.now();
      this.lastWaitMs = answeredAt - Math.max(started, this.lastAnswerAt);
      this.lastAnswerAt = answeredAt;
      cancel?.();
      release?.();
    };
  }
}
