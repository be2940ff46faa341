import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { GpuSampler, parseAppsCsv, parseGpuCsv } from '../../../src/metrics/gpu.js';
import { PrometheusMetrics } from '../../../src/metrics/prometheus.js';

// What nvidia-smi prints for these queries on a two-GPU host (driver 550), units off.
const GPU_CSV = '0, NVIDIA H200, 37, 20480, 143771\n1, NVIDIA H200, [N/A], 0, 143771\n';
const APPS_CSV = '4242, 18432\n4243, 2048\n4242, 512\n';

describe('nvidia-smi parsing', () => {
  it('reads utilisation and memory per GPU; unreported fields read as 0', () => {
    const gpus = parseGpuCsv(GPU_CSV);
    assert.equal(gpus.length, 2);
    assert.deepEqual(gpus[0], {
      index: 0,
      name: 'NVIDIA H200',
      utilization: 0.37,
      memory_used_bytes: 20480 * 2 ** 20,
      memory_total_bytes: 143771 * 2 ** 20,
    });
    assert.equal(gpus[1]?.utilization, 0);
    assert.deepEqual(parseGpuCsv('No devices were found\n'), []);
  });

  it('sums a process over GPUs', () => {
    const apps = parseAppsCsv(APPS_CSV);
    assert.equal(apps.get(4242), (18432 + 512) * 2 ** 20);
    assert.equal(apps.get(4243), 2048 * 2 ** 20);
  });
});

describe('GpuSampler', () => {
  it('reports nothing where the tool is missing', async () => {
    const sampler = new GpuSampler(1000, '/nonexistent/nvidia-smi');
    assert.equal(await sampler.start(), false);
    assert.equal(sampler.snapshot, undefined);
  });

  it('samples a GPU and exposes it in /metrics only then', async () => {
    // A stand-in for the driver's tool that answers both queries as nvidia-smi does.
    const dir = mkdtempSync(join(tmpdir(), 'tg-smi-'));
    const tool = join(dir, 'nvidia-smi');
    writeFileSync(
      tool,
      `#!/bin/sh\ncase "$1" in --query-gpu=*) printf '${GPU_CSV.replaceAll('\n', '\\n')}';; *) printf '${APPS_CSV.replaceAll('\n', '\\n')}';; esac\n`,
    );
    chmodSync(tool, 0o755);
    const sampler = new GpuSampler(60_000, tool);
    const metrics = new PrometheusMetrics({
      listModels: () => [],
      poolStats: () => undefined,
      registry: { reachable: true },
    });
    assert.doesNotMatch((await metrics.render()).text, /tensorgate_gpu_/);
    assert.equal(await sampler.start(), true);
    sampler.stop();
    assert.equal(sampler.snapshot?.gpus.length, 2);
    metrics.registerGpuMetrics(sampler);
    const text = (await metrics.render()).text;
    assert.match(text, /tensorgate_gpu_utilization_ratio\{gpu="0",name="NVIDIA H200"\} 0\.37/);
    assert.match(text, /tensorgate_gpu_memory_used_bytes\{gpu="0",name="NVIDIA H200"\} 21474836480/);
  });
});
