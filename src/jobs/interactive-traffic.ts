/**
 * What batch jobs watch to give way: per model, the calls that are not a job's (MCP tools, OIP,
 * workflows) in flight, when the last one started and when the last one ended. A call counts as
 * in flight from its arrival until the model has answered it (decode, queue, the worker's pass).
 */
export class InteractiveTraffic {
  private readonly models = new Map<string, { inFlight: number; startedAt: number; endedAt: number }>();

  begin(model: string): void {
    const now = performance.now();
    const entry = this.models.get(model);
    if (entry) {
      entry.inFlight++;
      entry.startedAt = now;
    } else this.models.set(model, { inFlight: 1, startedAt: now, endedAt: Number.NEGATIVE_INFINITY });
  }

  end(model: string): void {
    const entry = this.models.get(model);
    if (!entry) return;
    entry.inFlight = Math.max(0, entry.inFlight - 1);
    entry.endedAt = performance.now();
  }

  /** Whether a call came within the last `ms` (or is still in flight). */
  since(model: string, ms: number): boolean {
    const entry = this.models.get(model);
    return entry !== undefined && (entry.inFlight > 0 || performance.now() - entry.startedAt < ms);
  }

  /** How long the model has had no call in flight: 0 while one is, Infinity when none ever came. */
  quietMs(model: string): number {
    const entry = this.models.get(model);
    if (!entry) return Number.POSITIVE_INFINITY;
    return entry.inFlight > 0 ? 0 : performance.now() - entry.endedAt;
  }
}
