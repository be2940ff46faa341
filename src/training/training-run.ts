import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { asTensorgateError, tgError } from '../errors.js';
import { MetricSeries } from './metric-series.js';
import { decodeValue, type HyperparameterSpec, type RunDeclaration } from './run-declaration.js';
import type { ControlState, RunFileHandle, SlotSnapshot } from './run-file.js';

/**
 * One training run as the gateway sees it: its declaration, the metrics read from its ring so
 * far, the state of each rank, and the changes asked of it. `poll()` (10 times a second) reads
 * the file; changes are written to the control block by `TrainingControl` through `commit()`.
 */

export type RunState = 'starting' | 'running' | 'paused' | 'stopped' | 'finished' | 'exited';

export type RunCommand = 'pause' | 'resume' | 'checkpoint' | 'stop';

/** One change asked of a run (hyperparameters or a command), from request to application. */
export interface ChangeRecord {
  /** The control-block version it went out in; null while queued behind an unacknowledged one. */
  version: number | null;
  actor: string;
  requested_at: string;
  /** The step the trainer was at when the change was asked. */
  requested_step: number;
  values?: Record<string, { old: number | boolean; new: number | boolean }>;
  command?: RunCommand;
  checkpoint?: boolean;
  reason?: string;
  /** The step it applies at, no earlier: asked for, or chosen by the gateway at commit. */
  apply_at_step: number | null;
  /** The step at which the trainer applied it (every rank applies at the same step). */
  applied_step: number | null;
  status: 'queued' | 'pending' | 'applied';
}

/** A change waiting to be written: the whole desired state after it, and its record. */
export interface QueuedChange {
  values: number[];
  paused: boolean;
  stop: boolean;
  checkpointSeq: number;
  applyAtStep: number | null;
  record: ChangeRecord;
}

const HISTORY = 50;

export class TrainingRun {
  readonly series = new Map<string, MetricSeries>();
  readonly changes: ChangeRecord[] = [];
  slots: (SlotSnapshot | null)[] = [];
  /** The control block as this gateway last wrote or read it. */
  control: ControlState;
  /** Changes not yet written, oldest first: one version goes out per acknowledgement. */
  readonly queue: QueuedChange[] = [];
  exited = false;
  lostMetrics = 0;
  error: string | null = null;
  private names: string[] = [];
  private cursor = 0;
  /** Values by control version, to report the values in force for an applied version. */
  private readonly valuesByVersion = new Map<number, number[]>();

  constructor(
    readonly id: string,
    readonly declaration: RunDeclaration,
    private handle: RunFileHandle | null,
    control: ControlState,
  ) {
    this.control = control;
    this.valuesByVersion.set(
      0,
      declaration.hparams.map((h) => Number(h.initial)),
    );
    this.valuesByVersion.set(control.version, control.values);
  }

  get file(): RunFileHandle | null {
    return this.handle;
  }

  get specs(): HyperparameterSpec[] {
    return this.declaration.hparams;
  }

  /** The furthest step any rank has reached (or logged a metric at). */
  get step(): number {
    let step = -1;
    for (const slot of this.slots) if (slot && slot.step > step) step = slot.step;
    for (const series of this.series.values()) step = Math.max(step, series.summary().last.step);
    return step;
  }

  get state(): RunState {
    const slots = this.slots.slice(0, this.declaration.world_size);
    if (slots.length > 0 && slots.every((s) => s?.state === 'finished')) return 'finished';
    if (this.exited) return 'exited';
    if (slots.some((s) => s?.state === 'stopped')) return 'stopped';
    if (slots.length < this.declaration.world_size || slots.some((s) => !s || s.state === 'empty')) return 'starting';
    return slots[0]?.state === 'paused' ? 'paused' : 'running';
  }

  /** The values the trainer is using now: those of the version rank 0 applied last. */
  currentValues(): (number | boolean)[] {
    const applied = this.slots[0]?.appliedVersion ?? 0;
    const stored = this.valuesByVersion.get(applied) ?? this.valuesByVersion.get(0) ?? [];
    return this.specs.map((spec, i) => decodeValue(spec, stored[i] ?? Number(spec.initial)));
  }

  /** The state the next change starts from: the last queued one, else the last written. */
  desired(): Omit<QueuedChange, 'record' | 'applyAtStep'> {
    const base = this.queue.at(-1) ?? this.control;
    return { values: [...base.values], paused: base.paused, stop: base.stop, checkpointSeq: base.checkpointSeq };
  }

  /** True when every rank has seen the control block's current version: a new one may be written. */
  acknowledged(): boolean {
    const world = this.declaration.world_size;
    for (let rank = 0; rank < world; rank++) {
      const slot = this.slots[rank];
      if (!slot || slot.state === 'empty' || slot.seenVersion < this.control.version) return false;
    }
    return true;
  }

  /**
   * Writes the oldest queued change as the next control version. The default apply step is the next one
   * for a single process; with several ranks, two agreement rounds ahead, so that every rank has
   * seen the change before the round that applies it.
   */
  commit(): ControlState | null {
    const queued = this.queue[0];
    if (!queued || !this.handle) return null;
    const k = this.declaration.sync_every;
    const now = this.step;
    const soonest = this.declaration.world_size > 1 ? now + 2 * k : now + 1;
    const hasValues = queued.record.values !== undefined;
    const applyAtStep = hasValues ? Math.max(queued.applyAtStep ?? soonest, 0) : Math.max(now, 0);
    const next: ControlState = {
      version: this.control.version + 1,
      applyAtStep,
      values: queued.values,
      paused: queued.paused,
      stop: queued.stop,
      checkpointSeq: queued.checkpointSeq,
    };
    this.handle.writeControl(next);
    this.control = next;
    this.valuesByVersion.set(next.version, next.values);
    queued.record.version = next.version;
    queued.record.apply_at_step = applyAtStep;
    queued.record.status = 'pending';
    this.queue.shift();
    return next;
  }

  addChange(record: ChangeRecord): void {
    this.changes.push(record);
    if (this.changes.length > HISTORY) this.changes.splice(0, this.changes.length - HISTORY);
  }

  /** Reads slots and new metrics; returns the changes this poll found applied. Never throws. */
  poll(): ChangeRecord[] {
    const handle = this.handle;
    if (!handle) return [];
    try {
      if (!handle.isWhole()) throw tgError('RUN_FILE_CORRUPT', `${handle.path} was truncated while in use`);
      const world = this.declaration.world_size;
      this.slots = Array.from({ length: world }, (_, rank) => handle.readSlot(rank) ?? this.slots[rank] ?? null);
      this.readMetrics(handle);
      const applied = this.noteApplied();
      if (this.state !== 'finished' && !this.processesAlive()) this.exited = true;
      return applied;
    } catch (err) {
      this.error = asTensorgateError(err).message;
      this.exited = true;
      this.close();
      return [];
    }
  }

  private readMetrics(handle: RunFileHandle): void {
    const batch = handle.readMetrics(this.cursor);
    this.cursor = batch.cursor;
    this.lostMetrics += batch.lost;
    for (const entry of batch.entries) {
      if (entry.metric >= this.names.length) this.names = handle.readMetricNames();
      const name = this.names[entry.metric] ?? `metric_${entry.metric}`;
      let series = this.series.get(name);
      if (!series) {
        series = new MetricSeries();
        this.series.set(name, series);
      }
      series.push(entry.step, entry.value, entry.time);
    }
  }

  /** Marks pending changes that rank 0 has applied, with the step from its applied log. */
  private noteApplied(): ChangeRecord[] {
    const slot = this.slots[0];
    if (!slot) return [];
    const found: ChangeRecord[] = [];
    for (const record of this.changes) {
      if (record.status !== 'pending' || record.version === null || record.version > slot.appliedVersion) continue;
      const entry = slot.applied.find((a) => a.version === record.version);
      record.applied_step = entry ? entry.step : slot.appliedStep;
      record.status = 'applied';
      found.push(record);
    }
    return found;
  }

  /** Every rank's process still runs (same pid and start time); ranks on another host count as alive. */
  private processesAlive(): boolean {
    if (this.declaration.host !== hostname()) return true;
    const pids = new Map<number, number>([[this.declaration.pid, this.declaration.start_time]]);
    for (const slot of this.slots) if (slot && slot.pid > 0) pids.set(slot.pid, slot.startTime);
    for (const [pid, startTime] of pids) if (!processAlive(pid, startTime)) return false;
    return true;
  }

  close(): void {
    this.handle?.close();
    this.handle = null;
  }
}

/** A process with this pid exists and, where known, started at this time (so a reused pid is not it). */
export function processAlive(pid: number, startTime: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return false;
  }
  if (startTime === 0) return true;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const state = fields[0];
  if (state === 'Z' || state === 'X') return false; // exited, waiting for its parent to reap it
  return Number(fields[19]) === startTime;
}
