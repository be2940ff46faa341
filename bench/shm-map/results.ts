import type { MachineInfo } from '../mcp-overhead/machine.js';

/** The JSON bench/shm-map/run.ts writes to bench/results/ and bench/report.ts reads back. */

export type ShmMapScenarioId =
  | 'b64/decode-only'
  | 'b64/fs'
  | 'b64/fs-reserve'
  | 'npy/fs'
  | 'b64/mmap'
  | 'b64/mmap-write'
  | 'npy/mmap';

export interface ShmMapRow {
  /** Stable id (what bench/report.ts keys on). */
  id: ShmMapScenarioId;
  /** The label run.ts prints. */
  scenario: string;
  what: string;
  input: 'b64' | 'npy';
  arena: 'none' | 'fs' | 'mmap';
  /** Id of today's fs path for the same input form, measured in the same run: what the ratios divide by. */
  baseline: ShmMapScenarioId;
  ops: number;
  mean_us: number;
  p50_us: number;
  p99_us: number;
  /** This row's p50 / the baseline's p50 (1 for the baseline itself). */
  p50_vs_baseline: number;
  /** This row's mean / the baseline's mean. */
  mean_vs_baseline: number;
  minor_faults_per_op: number;
  /** GCs and their pause time over the timed ops (all rounds). */
  gcs: number;
  gc_ms: number;
  array_buffer_bytes_per_op: number;
  external_bytes_per_op: number;
}

export interface ShmMapResult {
  benchmark: 'shm-map';
  date: string;
  profiled: false;
  machine: MachineInfo;
  config: {
    shape: number[];
    dtype: 'float32';
    nbytes: number;
    b64_chars: number;
    /** Timed ops per scenario (spread over the rounds). */
    ops: number;
    rounds: number;
    warmup: number;
    /** Whether the mmap addon loaded; without it the mapped scenarios are missing. */
    mapped: boolean;
    mmap_unavailable_reason: string | null;
    wall_s: number;
  };
  rows: ShmMapRow[];
}
