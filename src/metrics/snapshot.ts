import type { Gateway } from '../gateway.js';
import type { JobInfo } from '../jobs/job-manager.js';
import type { VersionState } from '../scheduler/model-manager.js';
import type { RunListing } from '../training/training-control.js';
import { VERSION } from '../version.js';
import type { GpuSample } from './gpu.js';
import { processMemory } from './process-memory.js';
import { processUsage } from './process-usage.js';
import { round, type WindowSummary } from './request-window.js';

/**
 * One picture of the whole server: every model version's state, pool, workers and recent-window
 * figures, the GPUs, the training runs and the batch jobs running. `get_metrics`, the dashboard's live feed and
 * `tensorgate top` all read this one shape, so they never disagree.
 */

export interface WorkerSnapshot {
  pid: number;
  rss_bytes: number;
  /**
   * Proportional set size: the worker's own pages and its share of those it shares (a forked
   * worker shares torch's with its fork server and siblings), so that the workers' sum is what
   * they hold together. Absent where /proc/PID/smaps_rollup cannot be read.
   */
  pss_bytes?: number;
  cpu_seconds: number;
  /** Present when a GPU is and the process holds memory on it. */
  gpu_memory_bytes?: number;
}

export interface VersionSnapshot {
  version: string;
  state: VersionState;
  device?: string;
  instances: number;
  busy: number;
  queued: number;
  restarts: number;
  /** Forward passes by batch size, since load. */
  batches: Record<string, number>;
  /** Forward passes sent to a worker while it still ran another, since load. */
  pipelined: number;
  /** Parameters and buffers, all instances together. */
  loaded_bytes?: number;
  load_ms?: number;
  warmup_ms?: number;
  error?: string;
  workers: WorkerSnapshot[];
  /** Requests, rates, percentiles and errors over the recent window. */
  window: WindowSummary;
  /** Since the server started. */
  totals: { success: number; failure: number; inferences: number };
}

export interface ModelSnapshot {
  name: string;
  description: string;
  default_version: string;
  versions: VersionSnapshot[];
}

export interface ServerSnapshot {
  tensorgate: string;
  /** Epoch milliseconds. */
  time: number;
  uptime_s: number;
  /** Seconds the window figures cover: the window asked for, or less when the server is younger. */
  window_s: number;
  models: ModelSnapshot[];
  /** Failures that named no known model (unknown model, malformed request), over the window. */
  unattributed: { failed: number; top_errors: WindowSummary['top_errors'] };
  /** Absent where there is no GPU. */
  gpus?: GpuSample[];
  training: RunListing[];
  /** Batch jobs running in this process: progress, items/s, ETA. */
  jobs: JobInfo[];
}

export async function serverSnapshot(gateway: Gateway, windowMs: number): Promise<ServerSnapshot> {
  // The workers' memory is read off the main thread first (process-memory.ts); everything else is
  // taken after that wait, at one moment. A worker restarted meanwhile shows no pss_bytes.
  const memory = await processMemory.rollups(
    gateway.listModels().flatMap((m) => m.versions.flatMap((v) => v.stats?.pids ?? [])),
  );
  const now = Date.now();
  const gpu = gateway.gpu.snapshot;
  const models = gateway.listModels().map((m) => ({
    name: m.name,
    description: m.description,
    default_version: m.default_version,
    versions: m.versions.map((v): VersionSnapshot => {
      const stats = v.stats;
      const totals = gateway.stats.get(m.name, v.version);
      const workers = (stats?.pids ?? []).flatMap((pid): WorkerSnapshot[] => {
        const usage = processUsage(pid);
        if (!usage) return [];
        const gpuBytes = gpu?.processMemoryBytes.get(pid);
        const pss = memory.get(pid)?.pssBytes;
        return [
          {
            pid,
            rss_bytes: usage.rssBytes,
            ...(pss !== undefined ? { pss_bytes: pss } : {}),
            cpu_seconds: usage.cpuSeconds,
            ...(gpuBytes !== undefined ? { gpu_memory_bytes: gpuBytes } : {}),
          },
        ];
      });
      return {
        version: v.version,
        state: v.state,
        ...(v.device ? { device: v.device } : {}),
        instances: stats?.instances ?? 0,
        busy: stats?.busy ?? 0,
        queued: stats?.queued ?? 0,
        restarts: stats?.restarts ?? 0,
        batches: stats?.batches ?? {},
        pipelined: stats?.pipelined ?? 0,
        ...(v.loaded_bytes !== undefined ? { loaded_bytes: v.loaded_bytes } : {}),
        ...(v.load_ms !== undefined ? { load_ms: v.load_ms } : {}),
        ...(v.warmup_ms !== undefined ? { warmup_ms: v.warmup_ms } : {}),
        ...(v.error ? { error: v.error } : {}),
        workers,
        window: gateway.window.summary(m.name, v.version, windowMs, now),
        totals: { success: totals.success.count, failure: totals.fail.count, inferences: totals.inference_count },
      };
    }),
  }));
  const unattributed = gateway.window.summary('', '', windowMs, now);
  let training: RunListing[] = [];
  try {
    training = gateway.training.listRuns().runs;
  } catch {
    // An unreadable runs directory leaves the training panel empty; the models still show.
  }
  return {
    tensorgate: VERSION,
    time: now,
    uptime_s: Math.round(process.uptime()),
    window_s: round(gateway.window.coveredSeconds(windowMs, now)),
    models,
    unattributed: { failed: unattributed.failed, top_errors: unattributed.top_errors },
    ...(gpu ? { gpus: gpu.gpus } : {}),
    training,
    jobs: gateway.jobs.runningJobs(),
  };
}
