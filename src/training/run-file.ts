import { closeSync, fstatSync, openSync, readSync, writeSync } from 'node:fs';
import { tgError } from '../errors.js';

/**
 * The gateway's side of a run file (python/tensorgate/_runfile.py is the trainer's; the layout
 * table is in docs/training.md). The gateway reads and writes with positioned fs calls, never a
 * mapping: a run file that another process truncates then yields a short read, where a mapping
 * would kill the gateway with SIGBUS. At 10 reads a second per run the syscalls cost nothing.
 */

export const MAGIC = Buffer.from('TGRUN01\0', 'latin1');
export const LAYOUT_VERSION = 1;
const HEADER_SIZE = 16384;
const JSON_OFFSET = 64;
const CONTROL = HEADER_SIZE;
export const MAX_HPARAMS = 32;
const CONTROL_VALUES = 64;
const CONTROL_BYTES = CONTROL_VALUES + 8 * MAX_HPARAMS;
const SLOTS = CONTROL + 512;
const SLOT_SIZE = 512;
export const MAX_RANKS = 64;
const APPLIED_LOG = 16;
const SLOT_LOG = 80;
const SLOT_CHECKPOINT_PATH = SLOT_LOG + 16 * APPLIED_LOG;
const CHECKPOINT_PATH_BYTES = 128;
const NAMES = SLOTS + SLOT_SIZE * MAX_RANKS;
const NAME_BYTES = 64;
export const MAX_METRICS = 64;
const RING = NAMES + 64 + NAME_BYTES * MAX_METRICS;
const RING_ENTRIES = RING + 64;
const ENTRY_SIZE = 32;
const FLAG_PAUSED = 1;
const FLAG_STOP = 2;
/** Reads of a seqlock before giving up for this poll (the writer is mid-write or died in it). */
const SEQLOCK_TRIES = 64;

export const SLOT_STATES = ['empty', 'running', 'paused', 'stopped', 'finished'] as const;
export type SlotStateName = (typeof SLOT_STATES)[number];

export function runFileSize(ringCapacity: number): number {
  return RING_ENTRIES + ENTRY_SIZE * ringCapacity;
}

export interface ControlState {
  version: number;
  applyAtStep: number;
  paused: boolean;
  stop: boolean;
  checkpointSeq: number;
  values: number[];
}

export interface SlotSnapshot {
  step: number;
  seenVersion: number;
  appliedVersion: number;
  appliedStep: number;
  state: SlotStateName;
  pid: number;
  checkpointDone: number;
  checkpointStep: number;
  checkpointPath: string;
  startTime: number;
  /** The last (version, step) pairs this rank applied, oldest first. */
  applied: { version: number; step: number }[];
}

export interface MetricEntry {
  step: number;
  time: number;
  metric: number;
  value: number;
}

export interface MetricsBatch {
  entries: MetricEntry[];
  /** Entries overwritten before they were read (the gateway fell a whole ring behind). */
  lost: number;
  /** Where the next read starts. */
  cursor: number;
}

function corrupt(path: string, why: string) {
  return tgError('RUN_FILE_CORRUPT', `${path} is not a usable run file: ${why}`, { path });
}

/** Numbers in the file are u64/i64; JS numbers hold them exactly up to 2^53, far past any step. */
function u64(buf: Buffer, offset: number): number {
  return Number(buf.readBigUInt64LE(offset));
}
function i64(buf: Buffer, offset: number): number {
  return Number(buf.readBigInt64LE(offset));
}

export class RunFileHandle {
  private readonly seqBuf = Buffer.alloc(8);
  private closed = false;

  private constructor(
    readonly path: string,
    private readonly fd: number,
    readonly declarationJson: string,
    readonly ringCapacity: number,
  ) {}

  /** Opens and checks a run file; RUN_FILE_CORRUPT when it is not whole. Never throws anything else for bad content. */
  static open(path: string): RunFileHandle {
    const fd = openSync(path, 'r+');
    try {
      const header = Buffer.alloc(HEADER_SIZE);
      const got = readSync(fd, header, 0, HEADER_SIZE, 0);
      if (got < 32 || !header.subarray(0, 8).equals(MAGIC)) throw corrupt(path, 'no tensorgate run header');
      const [layout, jsonLength, ranks, hparams, metrics, capacity] = [2, 3, 4, 5, 6, 7].map((i) =>
        header.readUInt32LE(4 * i),
      ) as [number, number, number, number, number, number];
      if (layout !== LAYOUT_VERSION || ranks !== MAX_RANKS || hparams !== MAX_HPARAMS || metrics !== MAX_METRICS)
        throw corrupt(path, `layout ${layout} (this gateway reads layout ${LAYOUT_VERSION})`);
      if (capacity < 1 || jsonLength > HEADER_SIZE - JSON_OFFSET) throw corrupt(path, 'header numbers out of range');
      const size = fstatSync(fd).size;
      if (size < runFileSize(capacity)) throw corrupt(path, `truncated: ${size} of ${runFileSize(capacity)} bytes`);
      const json = header.toString('utf8', JSON_OFFSET, JSON_OFFSET + jsonLength);
      return new RunFileHandle(path, fd, json, capacity);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }

  /** Still as long as it was at open (false once something truncated it). */
  isWhole(): boolean {
    return fstatSync(this.fd).size >= runFileSize(this.ringCapacity);
  }

  private read(length: number, position: number): Buffer {
    const buf = Buffer.alloc(length);
    const got = readSync(this.fd, buf, 0, length, position);
    if (got < length) throw corrupt(this.path, 'truncated while in use');
    return buf;
  }

  private readSeq(position: number): number {
    const got = readSync(this.fd, this.seqBuf, 0, 8, position);
    if (got < 8) throw corrupt(this.path, 'truncated while in use');
    return u64(this.seqBuf, 0);
  }

  /** A consistent copy of a seqlock-guarded region, or null when every try met a write in progress. */
  private readGuarded(seqAt: number, from: number, length: number): Buffer | null {
    for (let i = 0; i < SEQLOCK_TRIES; i++) {
      const before = this.readSeq(seqAt);
      if (before % 2 === 1) continue;
      const data = this.read(length, from);
      if (this.readSeq(seqAt) === before) return data;
    }
    return null;
  }

  controlSeq(): number {
    return this.readSeq(CONTROL);
  }

  /** A consistent snapshot; null when every try met a write. `unguarded` then reads it as it lies (for repair). */
  readControl(unguarded = false): ControlState | null {
    const b =
      this.readGuarded(CONTROL, CONTROL, CONTROL_BYTES) ?? (unguarded ? this.read(CONTROL_BYTES, CONTROL) : null);
    if (!b) return null;
    const count = Math.min(b.readUInt32LE(28), MAX_HPARAMS);
    const flags = b.readUInt32LE(24);
    return {
      version: u64(b, 8),
      applyAtStep: i64(b, 16),
      paused: (flags & FLAG_PAUSED) !== 0,
      stop: (flags & FLAG_STOP) !== 0,
      checkpointSeq: u64(b, 32),
      values: Array.from({ length: count }, (_, i) => b.readDoubleLE(CONTROL_VALUES + 8 * i)),
    };
  }

  /**
   * The gateway is the control block's only writer: seq odd, the block, seq even (the next
   * even number). A writer that died between leaves seq odd; the next one starts from there.
   */
  writeControl(state: ControlState): void {
    if (state.values.length > MAX_HPARAMS) throw new RangeError(`at most ${MAX_HPARAMS} values`);
    const seq = this.controlSeq();
    const odd = seq % 2 === 1 ? seq : seq + 1;
    const block = Buffer.alloc(CONTROL_BYTES - 8);
    block.writeBigUInt64LE(BigInt(state.version), 0);
    block.writeBigInt64LE(BigInt(state.applyAtStep), 8);
    block.writeUInt32LE((state.paused ? FLAG_PAUSED : 0) | (state.stop ? FLAG_STOP : 0), 16);
    block.writeUInt32LE(state.values.length, 20);
    block.writeBigUInt64LE(BigInt(state.checkpointSeq), 24);
    state.values.forEach((v, i) => {
      block.writeDoubleLE(v, CONTROL_VALUES - 8 + 8 * i);
    });
    this.writeSeq(odd);
    writeSync(this.fd, block, 0, block.length, CONTROL + 8);
    this.writeSeq(odd + 1);
  }

  private writeSeq(value: number): void {
    this.seqBuf.writeBigUInt64LE(BigInt(value), 0);
    writeSync(this.fd, this.seqBuf, 0, 8, CONTROL);
  }

  readSlot(rank: number): SlotSnapshot | null {
    const base = SLOTS + SLOT_SIZE * rank;
    const b = this.readGuarded(base + 8, base, SLOT_SIZE);
    if (!b) return null;
    const logHead = b.readUInt32LE(64);
    const applied: SlotSnapshot['applied'] = [];
    for (let i = Math.max(0, logHead - APPLIED_LOG); i < logHead; i++) {
      const at = SLOT_LOG + 16 * (i % APPLIED_LOG);
      applied.push({ version: u64(b, at), step: i64(b, at + 8) });
    }
    const path = b.subarray(SLOT_CHECKPOINT_PATH, SLOT_CHECKPOINT_PATH + CHECKPOINT_PATH_BYTES);
    const end = path.indexOf(0);
    return {
      step: i64(b, 0),
      seenVersion: u64(b, 16),
      appliedVersion: u64(b, 24),
      appliedStep: i64(b, 32),
      state: SLOT_STATES[b.readUInt32LE(40)] ?? 'empty',
      pid: b.readUInt32LE(44),
      checkpointDone: u64(b, 48),
      checkpointStep: i64(b, 56),
      startTime: u64(b, 72),
      checkpointPath: path.toString('utf8', 0, end < 0 ? path.length : end),
      applied,
    };
  }

  /** Metric names the trainer has declared so far, by index. */
  readMetricNames(): string[] {
    const count = Math.min(this.read(4, NAMES).readUInt32LE(0), MAX_METRICS);
    const raw = this.read(NAME_BYTES * count, NAMES + 64);
    return Array.from({ length: count }, (_, i) => {
      const name = raw.subarray(NAME_BYTES * i, NAME_BYTES * (i + 1));
      const end = name.indexOf(0);
      return name.toString('utf8', 0, end < 0 ? NAME_BYTES : end);
    });
  }

  /**
   * Entries written since `cursor`, at most `max`. The trainer writes an entry, then the head;
   * after copying, the head is read again, and any entry the trainer may have been overwriting
   * meanwhile (index <= head - capacity) is dropped as lost instead of being returned torn.
   */
  readMetrics(cursor: number, max = this.ringCapacity): MetricsBatch {
    const capacity = this.ringCapacity;
    const head = this.readSeq(RING);
    if (head < cursor) return { entries: [], lost: 0, cursor: head }; // a new file under the same name
    const from = Math.max(cursor, head - capacity);
    const to = Math.min(head, from + max);
    const count = to - from;
    const raw = Buffer.alloc(ENTRY_SIZE * count);
    // The wanted entries may wrap around the end of the ring: copy in up to two pieces.
    let copied = 0;
    while (copied < count) {
      const slot = (from + copied) % capacity;
      const n = Math.min(count - copied, capacity - slot);
      const got = readSync(this.fd, raw, ENTRY_SIZE * copied, ENTRY_SIZE * n, RING_ENTRIES + ENTRY_SIZE * slot);
      if (got < ENTRY_SIZE * n) throw corrupt(this.path, 'truncated while in use');
      copied += n;
    }
    const headAfter = this.readSeq(RING);
    const firstSafe = headAfter - capacity + 1;
    const skip = Math.max(0, firstSafe - from);
    const lost = from - cursor + Math.min(skip, count);
    const entries: MetricEntry[] = [];
    for (let i = skip; i < count; i++) {
      const at = ENTRY_SIZE * i;
      entries.push({
        step: i64(raw, at),
        time: raw.readDoubleLE(at + 8),
        metric: raw.readUInt32LE(at + 16),
        value: raw.readDoubleLE(at + 24),
      });
    }
    return { entries, lost, cursor: to };
  }
}
