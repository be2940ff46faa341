/**
 * A one-line progress indicator for long CLI work (loading models, bench rounds): a bar when the
 * total is known, a spinner otherwise, with the elapsed time. It draws on stderr, and only when
 * stderr is a terminal: piped into a log file or a test it writes nothing at all. Redraws are
 * throttled, and log lines written through `interrupt` appear above it instead of through it.
 */

/** The part of a stream this needs; process.stderr is one, and a test passes a fake. */
export interface ProgressStream {
  isTTY?: boolean;
  columns?: number;
  write(chunk: string): unknown;
}

export interface ProgressOptions {
  stream?: ProgressStream;
  /** Items to do; omit for a spinner with no bar. */
  total?: number;
  /** What is being done, before the bar. */
  label?: string;
  /** Least time between two redraws, in ms (the spinner and clock tick at this rate). */
  intervalMs?: number;
  /** Redraw on a timer, from the first update on, so the clock moves while nothing else does. */
  tick?: boolean;
}

const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const BAR_WIDTH = 20;
const CLEAR_LINE = '\r\x1b[K';

export class Progress {
  private readonly stream: ProgressStream;
  private readonly active: boolean;
  private readonly intervalMs: number;
  private readonly started = Date.now();
  private readonly ticking: boolean;
  private timer: NodeJS.Timeout | undefined;
  private lastDraw = 0;
  private frame = 0;
  private shown = false;
  private stopped = false;
  private total: number | undefined;
  private done = 0;
  private label: string;
  private detail = '';

  constructor(options: ProgressOptions = {}) {
    this.stream = options.stream ?? process.stderr;
    this.active = this.stream.isTTY === true;
    this.intervalMs = options.intervalMs ?? 100;
    this.total = options.total;
    this.label = options.label ?? '';
    this.ticking = options.tick !== false;
  }

  /** Whether anything is drawn at all (stderr is a terminal). */
  get enabled(): boolean {
    return this.active;
  }

  /** Sets how far along the work is; any field left out keeps its value. */
  update(state: { done?: number; total?: number; label?: string; detail?: string }): void {
    if (state.done !== undefined) this.done = state.done;
    if (state.total !== undefined) this.total = state.total;
    if (state.label !== undefined) this.label = state.label;
    if (state.detail !== undefined) this.detail = state.detail;
    if (Date.now() - this.lastDraw >= this.intervalMs) this.draw();
  }

  /** One more item done. */
  tick(detail?: string): void {
    this.update({ done: this.done + 1, ...(detail !== undefined ? { detail } : {}) });
  }

  /** Runs `write` (a log line, say) with the indicator out of the way, then draws it again. */
  interrupt(write: () => void): void {
    if (!this.active || !this.shown || this.stopped) {
      write();
      return;
    }
    this.stream.write(CLEAR_LINE);
    this.shown = false;
    write();
    this.draw();
  }

  /** A logger that writes through `interrupt`: pass it where log lines go while this is shown. */
  wrap<Args extends unknown[]>(log: (...args: Args) => void): (...args: Args) => void {
    return (...args) => this.interrupt(() => log(...args));
  }

  /** Removes the indicator for good; a final line, when given, is written in its place. */
  stop(finalLine?: string): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (!this.active) return;
    if (this.shown) this.stream.write(CLEAR_LINE);
    this.shown = false;
    if (finalLine !== undefined) this.stream.write(`${finalLine}\n`);
  }

  /** The line as it would be drawn now, at most `width` characters. */
  render(width: number): string {
    const parts: string[] = [];
    if (this.label) parts.push(this.label);
    if (this.total !== undefined && this.total > 0) {
      const ratio = Math.min(1, Math.max(0, this.done / this.total));
      const filled = Math.round(ratio * BAR_WIDTH);
      parts.push(`[${'█'.repeat(filled)}${'░'.repeat(BAR_WIDTH - filled)}] ${this.done}/${this.total}`);
    } else {
      parts.push(SPINNER[this.frame % SPINNER.length] as string);
    }
    parts.push(elapsed(Date.now() - this.started));
    if (this.detail) parts.push(this.detail);
    return fit(parts.join(' '), width);
  }

  private draw(): void {
    if (!this.active || this.stopped) return;
    if (this.ticking && !this.timer) {
      // Nothing is drawn before the first update; from then on the clock moves by itself.
      this.timer = setInterval(() => this.draw(), this.intervalMs);
      this.timer.unref();
    }
    this.lastDraw = Date.now();
    this.frame++;
    const width = Math.max(10, (this.stream.columns ?? 80) - 1);
    this.stream.write(`${CLEAR_LINE}${this.render(width)}`);
    this.shown = true;
  }
}

/** "4.2s", "1m05s". */
export function elapsed(ms: number): string {
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const whole = Math.floor(s);
  return `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, '0')}s`;
}

function fit(line: string, width: number): string {
  const chars = [...line];
  return chars.length <= width ? line : `${chars.slice(0, Math.max(0, width - 1)).join('')}…`;
}
