import {
  type FSWatcher,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  unlinkSync,
  watch,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import type { AuditLog } from '../audit/audit-log.js';
import { asTensorgateError, tgError } from '../errors.js';
import type { MetricPoint, MetricSummary } from './metric-series.js';
import { renderCurvesPng } from './plot-png.js';
import { checkValue, decodeValue, RunDeclarationSchema } from './run-declaration.js';
import { RunFileHandle } from './run-file.js';
import { type ChangeRecord, processAlive, type RunCommand, type RunState, TrainingRun } from './training-run.js';

/**
 * The gateway's training control plane: finds runs in the runs directory, reads their metrics ten
 * times a second, validates and writes changes, and records every change in the audit log. One
 * gateway per runs directory controls the runs (a lock file says which); others only observe.
 *
 * Trainers write their files through shared memory, which raises no event: while a run is live
 * the gateway polls. With none live it waits on the directory (inotify), so that a new run is
 * found at once, and polls only once a second in case an event is missed (a file system without
 * inotify, a directory replaced).
 */

export interface TrainingOptions {
  runsDir: string;
  audit: AuditLog;
  /** How often runs are read while one is live (ms). */
  pollMs?: number;
  /** How often the directory is read while no run is live, beside its inotify events (ms). */
  idlePollMs?: number;
  log?: (line: string) => void;
}

export interface RunListing {
  id: string;
  name: string;
  state: RunState;
  step: number;
  world_size: number;
  started_at: string;
  pid: number;
  /** The last value of each metric. */
  latest: Record<string, number>;
}

export interface UnreadableRun {
  file: string;
  error: string;
}

export interface ChangeAnswer {
  run: string;
  status: ChangeRecord['status'];
  version: number | null;
  requested_step: number;
  apply_at_step: number | null;
  values?: ChangeRecord['values'];
  command?: RunCommand;
  checkpoint?: boolean;
  note: string;
}

export interface GetRunOptions {
  metrics?: string[];
  points?: number;
  sinceStep?: number;
}

const SUFFIX = '.tgrun';
const LOCK = '.tensorgate-control.lock';
/** A file younger than this without a header may still be being created by its trainer. */
const CREATE_GRACE_MS = 5_000;

function runNotFound(id: string) {
  return tgError('RUN_NOT_FOUND', `no training run ${JSON.stringify(id)}; call list_runs for the ids`, { run: id });
}

export class TrainingControl {
  private readonly runs = new Map<string, TrainingRun>();
  private readonly unreadable = new Map<string, UnreadableRun>();
  private timer: NodeJS.Timeout | undefined;
  private watcher: FSWatcher | undefined;
  private started = false;
  /** Set by a scan that left a file alone because its trainer may still be creating it. */
  private deferred = false;
  private ownsLock = false;
  readonly runsDir: string;

  constructor(private readonly options: TrainingOptions) {
    this.runsDir = options.runsDir;
  }

  /** True when this gateway may write control blocks (it holds the runs directory's lock). */
  get controls(): boolean {
    return this.ownsLock;
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    try {
      mkdirSync(this.runsDir, { recursive: true, mode: 0o700 });
    } catch (err) {
      this.options.log?.(`training: cannot create ${this.runsDir}: ${asTensorgateError(err).message}`);
    }
    this.ownsLock = this.takeLock();
    if (!this.ownsLock) this.options.log?.(`training: another tensorgate controls ${this.runsDir}; observing only`);
    this.watch();
    this.poll();
  }

  close(): void {
    this.started = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.watcher?.close();
    this.watcher = undefined;
    for (const run of this.runs.values()) run.close();
    if (this.ownsLock) {
      try {
        unlinkSync(join(this.runsDir, LOCK));
      } catch {}
      this.ownsLock = false;
    }
  }

  /** A tick, then the next one: soon while a run is live, else at the idle pace. */
  private poll(): void {
    clearTimeout(this.timer);
    this.tick();
    if (!this.started) return;
    const delay = this.live() ? (this.options.pollMs ?? 100) : (this.options.idlePollMs ?? 1000);
    this.timer = setTimeout(() => this.poll(), delay);
    this.timer.unref();
  }

  /** True while the poll must stay quick: a run that may still step, or a file not yet read. */
  private live(): boolean {
    if (this.deferred) return true;
    for (const run of this.runs.values())
      if (run.queue.length > 0 || (run.state !== 'finished' && run.state !== 'exited')) return true;
    return false;
  }

  /** Wakes the idle poll when the directory changes (a trainer creates its run file). */
  private watch(): void {
    try {
      this.watcher = watch(this.runsDir, { persistent: false }, () => {
        if (this.started && !this.live()) this.poll();
      });
      this.watcher.on('error', () => {
        this.watcher?.close();
        this.watcher = undefined; // the idle poll still finds new runs, within a second
      });
    } catch {
      // No such directory, or no inotify here: the idle poll alone finds new runs.
    }
  }

  /** One poll: new files, then every open run's slots and metrics, then queued changes. */
  tick(): void {
    try {
      this.scan();
    } catch (err) {
      this.options.log?.(`training: cannot read ${this.runsDir}: ${asTensorgateError(err).message}`);
    }
    for (const run of this.runs.values()) this.pollRun(run);
  }

  private pollRun(run: TrainingRun): void {
    for (const record of run.poll()) {
      this.options.audit.record({
        actor: 'gateway',
        action: 'applied',
        target: `run:${run.id}`,
        version: record.version,
        ...(record.values ? { values: record.values } : {}),
        ...(record.command ? { command: record.command } : {}),
        requested_step: record.requested_step,
        apply_at_step: record.apply_at_step,
        applied_step: record.applied_step,
      });
    }
    if (run.queue.length > 0 && run.file && this.ownsLock && run.acknowledged()) run.commit();
  }

  private scan(): void {
    this.deferred = false;
    let names: string[];
    try {
      names = readdirSync(this.runsDir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    const present = new Set(names);
    for (const file of this.unreadable.keys()) if (!present.has(file)) this.unreadable.delete(file);
    for (const file of names) {
      if (!file.endsWith(SUFFIX)) continue;
      const id = file.slice(0, -SUFFIX.length);
      if (this.runs.has(id) || this.unreadable.has(file)) continue;
      this.discover(id, file);
    }
  }

  private discover(id: string, file: string): void {
    const path = join(this.runsDir, file);
    let handle: RunFileHandle | undefined;
    try {
      handle = RunFileHandle.open(path);
      const parsed = RunDeclarationSchema.safeParse(JSON.parse(handle.declarationJson));
      if (!parsed.success) throw tgError('RUN_FILE_CORRUPT', `${path}: its declaration does not parse`);
      const control = handle.readControl() ?? this.repairControl(handle);
      this.runs.set(id, new TrainingRun(id, parsed.data, handle, control));
    } catch (err) {
      handle?.close();
      let young = false;
      try {
        young = Date.now() - statSync(path).mtimeMs < CREATE_GRACE_MS;
      } catch {
        return; // gone already
      }
      if (young) this.deferred = true;
      else this.unreadable.set(file, { file, error: asTensorgateError(err).message });
    }
  }

  /**
   * A control block whose seq stays odd: the gateway writing it died mid-write. Its owner now
   * rewrites the content as found (the version is what a trainer would have read, if anything).
   */
  private repairControl(handle: RunFileHandle) {
    const state = handle.readControl(true);
    if (!state) throw tgError('RUN_FILE_CORRUPT', `${handle.path}: its control block cannot be read`);
    if (this.ownsLock) handle.writeControl(state);
    return state;
  }

  private takeLock(): boolean {
    const path = join(this.runsDir, LOCK);
    const me = { pid: process.pid, start_time: ownStartTime() };
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        writeFileSync(path, JSON.stringify(me), { flag: 'wx', mode: 0o600 });
        return true;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') return false; // no runs directory: nothing to control yet
        if (code !== 'EEXIST') throw err;
      }
      try {
        const holder = JSON.parse(readFileSync(path, 'utf8')) as { pid: number; start_time: number };
        if (processAlive(holder.pid, holder.start_time)) return false;
        unlinkSync(path); // a holder that is gone: take over
      } catch {
        try {
          unlinkSync(path);
        } catch {}
      }
    }
    return false;
  }

  // ------------------------------------------------------------------ queries

  listRuns(): { runs: RunListing[]; unreadable: UnreadableRun[] } {
    this.tick();
    const runs = [...this.runs.values()].map((run) => ({
      id: run.id,
      name: run.declaration.name,
      state: run.state,
      step: run.step,
      world_size: run.declaration.world_size,
      started_at: run.declaration.started_at,
      pid: run.declaration.pid,
      latest: Object.fromEntries([...run.series].map(([name, s]) => [name, s.summary().last.value])),
    }));
    runs.sort((a, b) => b.started_at.localeCompare(a.started_at));
    return { runs, unreadable: [...this.unreadable.values()] };
  }

  run(id: string): TrainingRun {
    const run = this.runs.get(id);
    if (!run) {
      this.tick();
      const found = this.runs.get(id);
      if (!found) throw runNotFound(id);
      return found;
    }
    this.pollRun(run);
    return run;
  }

  getRun(id: string, options: GetRunOptions = {}) {
    const run = this.run(id);
    const wanted = options.metrics?.length ? options.metrics : [...run.series.keys()];
    const metrics: Record<string, MetricSummary> = {};
    const series: Record<string, [number, number][]> = {};
    for (const name of wanted) {
      const s = run.series.get(name);
      if (!s) continue;
      metrics[name] = s.summary();
      const points = options.points ?? 50;
      if (points > 0) series[name] = s.downsample(points, options.sinceStep).map((p: MetricPoint) => [p.step, p.value]);
    }
    const current = run.currentValues();
    const hyperparameters = run.specs.map((spec, i) => {
      const pending = [...run.changes].reverse().find((c) => c.status !== 'applied' && c.values?.[spec.name]);
      return {
        ...spec,
        current: current[i] as number | boolean,
        ...(pending
          ? {
              pending: {
                value: pending.values?.[spec.name]?.new as number | boolean,
                status: pending.status,
                apply_at_step: pending.apply_at_step,
              },
            }
          : {}),
      };
    });
    const rank0 = run.slots[0];
    const d = run.declaration;
    return {
      id: run.id,
      name: d.name,
      state: run.state,
      step: run.step,
      pid: d.pid,
      host: d.host,
      started_at: d.started_at,
      world_size: d.world_size,
      scheduler: d.scheduler,
      checkpoint_callback: d.checkpoint,
      hyperparameters,
      metrics,
      series,
      changes: run.changes.slice(-10),
      last_checkpoint:
        rank0 && rank0.checkpointDone > 0 ? { step: rank0.checkpointStep, path: rank0.checkpointPath || null } : null,
      ...(d.world_size > 1
        ? {
            ranks: run.slots.map((s, rank) => ({
              rank,
              step: s?.step ?? -1,
              state: s?.state ?? 'empty',
              applied_version: s?.appliedVersion ?? 0,
            })),
          }
        : {}),
      lost_metrics: run.lostMetrics,
      ...(run.error ? { error: run.error } : {}),
    };
  }

  /** The kept points of every metric as CSV, one row per step and a column per metric. */
  metricsCsv(id: string): string {
    const run = this.run(id);
    const names = [...run.series.keys()];
    const rows = new Map<number, (number | undefined)[]>();
    names.forEach((name, column) => {
      const { steps, values } = (run.series.get(name) as NonNullable<ReturnType<typeof run.series.get>>).points();
      for (let i = 0; i < steps.length; i++) {
        const step = steps[i] as number;
        let row = rows.get(step);
        if (!row) {
          row = new Array(names.length);
          rows.set(step, row);
        }
        row[column] = values[i];
      }
    });
    const lines = [['step', ...names].map(csvField).join(',')];
    for (const step of [...rows.keys()].sort((a, b) => a - b)) {
      const row = rows.get(step) ?? [];
      lines.push([step, ...names.map((_, c) => row[c] ?? '')].join(','));
    }
    return `${lines.join('\n')}\n`;
  }

  plot(id: string, metrics?: string[]): Buffer {
    const run = this.run(id);
    const names = metrics?.length ? metrics.filter((m) => run.series.has(m)) : [...run.series.keys()];
    return renderCurvesPng(
      names.map((name) => {
        const { steps, values } = (run.series.get(name) as NonNullable<ReturnType<typeof run.series.get>>).points();
        return { name, steps, values };
      }),
      { title: `${run.id} (step ${run.step})` },
    );
  }

  // ------------------------------------------------------------------ changes

  private steerable(id: string): TrainingRun {
    const run = this.run(id);
    if (!this.ownsLock)
      throw tgError('RUN_CONTROLLED_ELSEWHERE', `another tensorgate server controls ${this.runsDir}; ask it instead`, {
        run: id,
      });
    const state = run.state;
    if (state === 'exited' || state === 'finished' || state === 'stopped' || !run.file)
      throw tgError('RUN_EXITED', `run ${id} has ${state === 'exited' ? 'exited' : state}; it takes no more changes`, {
        run: id,
        state,
      });
    return run;
  }

  setHyperparameters(
    id: string,
    values: Record<string, unknown>,
    options: { applyAtStep?: number; reason?: string; actor: string },
  ): ChangeAnswer {
    const run = this.steerable(id);
    const entries = Object.entries(values);
    if (entries.length === 0)
      throw tgError('INVALID_HYPERPARAMETER', 'give at least one hyperparameter to change', { run: id });
    if (options.applyAtStep !== undefined && !(Number.isInteger(options.applyAtStep) && options.applyAtStep >= 0))
      throw tgError('BAD_PARAMETER', `apply_at_step takes a non-negative integer, got ${options.applyAtStep}`);
    const desired = run.desired();
    const changes: NonNullable<ChangeRecord['values']> = {};
    // Every value is checked before anything is queued: a bad one leaves the run untouched.
    for (const [name, value] of entries) {
      const index = run.specs.findIndex((s) => s.name === name);
      const spec = run.specs[index];
      if (!spec)
        throw tgError(
          'UNKNOWN_HYPERPARAMETER',
          `run ${id} declares no hyperparameter ${JSON.stringify(name)}; it declares ${run.specs.map((s) => s.name).join(', ') || 'none'}`,
          { run: id, hyperparameter: name },
        );
      const stored = checkValue(id, spec, value);
      changes[name] = { old: decodeValue(spec, desired.values[index] as number), new: decodeValue(spec, stored) };
      desired.values[index] = stored;
    }
    return this.enqueue(run, desired, options, { values: changes }, 'set_hyperparameters', options.applyAtStep);
  }

  control(id: string, command: RunCommand, options: { checkpoint?: boolean; reason?: string; actor: string }) {
    const run = this.steerable(id);
    const desired = run.desired();
    const checkpoint =
      command === 'checkpoint' || (command === 'stop' && (options.checkpoint ?? run.declaration.checkpoint));
    if (checkpoint && !run.declaration.checkpoint)
      throw tgError(
        'BAD_PARAMETER',
        `run ${id} has no checkpoint callback (train.attach(on_checkpoint=...)); stop it with checkpoint: false`,
        { run: id },
      );
    if (command === 'pause') desired.paused = true;
    if (command === 'resume') desired.paused = false;
    if (command === 'stop') desired.stop = true;
    if (checkpoint) desired.checkpointSeq += 1;
    return this.enqueue(run, desired, options, { command, checkpoint }, 'control_run');
  }

  private enqueue(
    run: TrainingRun,
    desired: ReturnType<TrainingRun['desired']>,
    options: { reason?: string; actor: string },
    what: Pick<ChangeRecord, 'values' | 'command' | 'checkpoint'>,
    action: string,
    applyAtStep?: number,
  ): ChangeAnswer {
    const record: ChangeRecord = {
      version: null,
      actor: options.actor,
      requested_at: new Date().toISOString(),
      requested_step: run.step,
      ...what,
      ...(options.reason ? { reason: options.reason } : {}),
      apply_at_step: applyAtStep ?? null,
      applied_step: null,
      status: 'queued',
    };
    run.queue.push({ ...desired, applyAtStep: applyAtStep ?? null, record });
    run.addChange(record);
    this.options.audit.record({
      actor: options.actor,
      action,
      target: `run:${run.id}`,
      ...what,
      requested_step: record.requested_step,
      ...(applyAtStep !== undefined ? { apply_at_step: applyAtStep } : {}),
      ...(options.reason ? { reason: options.reason } : {}),
    });
    if (run.acknowledged()) run.commit();
    const note =
      record.status === 'queued'
        ? 'queued: the trainer has not yet seen the previous change; this one goes out as soon as it has, in order'
        : `pending: applies at step ${record.apply_at_step} or the first step boundary after; get_run shows the step it was applied at`;
    return {
      run: run.id,
      status: record.status,
      version: record.version,
      requested_step: record.requested_step,
      apply_at_step: record.apply_at_step,
      ...what,
      note,
    };
  }
}

function csvField(value: string): string {
  return /[",\n]/.test(value) ? `"${value.replace(/"/g, '""')}"` : value;
}

function ownStartTime(): number {
  try {
    const stat = readFileSync('/proc/self/stat', 'latin1');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
  } catch {
    return 0;
  }
}
