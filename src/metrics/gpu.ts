import { CommandShell } from './command-shell.js';

/**
 * GPU utilisation and memory from `nvidia-smi`, sampled in the background every few seconds so a
 * scrape or a dashboard tick never waits for it. nvidia-smi runs through one long-lived shell
 * (command-shell.ts): started directly, each run forked the gateway, and the event loop waited.
 * Where `nvidia-smi` is missing or finds no GPU, the sampler stops after its first try and reports
 * nothing: GPU metrics are absent, not zero.
 */

export interface GpuSample {
  index: number;
  name: string;
  /** 0-1, over nvidia-smi's last sample period. */
  utilization: number;
  memory_used_bytes: number;
  memory_total_bytes: number;
}

export interface GpuSnapshot {
  gpus: GpuSample[];
  /** GPU memory used by each process (tensorgate's workers among them), by pid. */
  processMemoryBytes: Map<number, number>;
}

const MIB = 1024 * 1024;
/** nvidia-smi's arguments for the per-GPU figures (exported for bench/metrics-overhead). */
export const GPU_QUERY = [
  '--query-gpu=index,name,utilization.gpu,memory.used,memory.total',
  '--format=csv,noheader,nounits',
];
const APPS_QUERY = ['--query-compute-apps=pid,used_memory', '--format=csv,noheader,nounits'];

/** Parses `--query-gpu=index,name,utilization.gpu,memory.used,memory.total` CSV (MiB, percent). */
export function parseGpuCsv(text: string): GpuSample[] {
  const out: GpuSample[] = [];
  for (const line of text.split('\n')) {
    const cells = line.split(',').map((c) => c.trim());
    if (cells.length < 5) continue;
    const [index, name, util, used, total] = cells as [string, string, string, string, string];
    const n = [Number(index), Number(util), Number(used), Number(total)];
    // "[N/A]" (a field the GPU does not report) reads as NaN: keep the GPU, drop the field's value.
    if (!Number.isInteger(n[0])) continue;
    out.push({
      index: n[0] as number,
      name,
      utilization: Number.isFinite(n[1]) ? (n[1] as number) / 100 : 0,
      memory_used_bytes: Number.isFinite(n[2]) ? (n[2] as number) * MIB : 0,
      memory_total_bytes: Number.isFinite(n[3]) ? (n[3] as number) * MIB : 0,
    });
  }
  return out;
}

/** Parses `--query-compute-apps=pid,used_memory` CSV (MiB); a pid on several GPUs is summed. */
export function parseAppsCsv(text: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const line of text.split('\n')) {
    const [pid, used] = line.split(',').map((c) => Number(c.trim()));
    if (!Number.isInteger(pid) || !Number.isFinite(used)) continue;
    out.set(pid as number, (out.get(pid as number) ?? 0) + (used as number) * MIB);
  }
  return out;
}

export class GpuSampler {
  private latest: GpuSnapshot | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly shell = new CommandShell(5000);

  constructor(
    private readonly intervalMs = 5000,
    private readonly command = process.env.TENSORGATE_NVIDIA_SMI ?? 'nvidia-smi',
  ) {}

  /** The newest sample; undefined where there is no GPU (or before the first sample). */
  get snapshot(): GpuSnapshot | undefined {
    return this.latest;
  }

  /** Takes a first sample and keeps sampling when it found a GPU; resolves with whether it did. */
  async start(): Promise<boolean> {
    if (!(await this.sample()) || this.stopped) {
      this.shell.close(); // nothing to sample: no shell kept
      return false;
    }
    this.timer = setInterval(() => void this.sample(), this.intervalMs);
    this.timer.unref();
    return true;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.shell.close();
  }

  private async sample(): Promise<boolean> {
    try {
      const gpus = parseGpuCsv(await this.shell.run([this.command, ...GPU_QUERY]));
      if (gpus.length === 0) return false;
      const apps = await this.shell.run([this.command, ...APPS_QUERY]).catch(() => '');
      this.latest = { gpus, processMemoryBytes: parseAppsCsv(apps) };
      return true;
    } catch {
      // No nvidia-smi, no driver, or no GPU: absent. A later failure keeps the last good sample.
      return this.latest !== undefined;
    }
  }
}
