/** What bench/gpu/check.py writes (gpu-check-<time>.json), and its docs/benchmarks.md section. */

interface GpuCheckRow {
  model: string;
  format?: string;
  ok: boolean;
  error?: string;
  served_vs_in_process?: { output: string; rule: string; error: number | null; changed: number; within: boolean };
  variants?: { precision: string; method: string; state: string; error?: number; build_ms?: number }[];
  worker_gpu_memory_mb?: number | null;
}

export interface GpuCheckFile {
  benchmark: 'gpu-check';
  date: string;
  device: string;
  gpu: string | null;
  torch: string;
  seconds: number;
  models: GpuCheckRow[];
}

export function renderGpuCheck(files: unknown[]): string {
  const f = files.at(-1) as GpuCheckFile;
  const rows = f.models.map((m) => {
    const served = m.served_vs_in_process;
    const error = served?.error === null || served === undefined ? 'inf' : served.error.toExponential(1);
    const check = served ? `${error} of its ${served.rule === 'classes' ? 'range' : 'spread'}` : '-';
    const variants = (m.variants ?? [])
      .map((v) => `${v.precision} ${v.state} (${v.method}${v.build_ms ? `, ${(v.build_ms / 1000).toFixed(1)} s` : ''})`)
      .join('; ');
    return `| ${m.model} | ${m.format ?? '-'} | ${check} | ${m.error ?? variants} | ${m.worker_gpu_memory_mb ?? '-'} | ${m.ok ? 'ok' : 'failed'} |`;
  });
  const ok = f.models.filter((m) => m.ok).length;
  return [
    '## Current PyTorch on a GPU (bench/gpu/check.py)',
    '',
    `\`python3 bench/gpu/check.py\`: the demo models served on \`${f.device}\` (${f.gpu ?? 'no GPU'}, torch ${f.torch}) as a \`.pt2\` program, eager code, eager compiled by \`torch.compile\` and by AOTInductor at load, TorchScript, and an AOTInductor package made by \`tensorgate export\`; each OIP v2 answer against a plain forward of the same file in one process on the same device, every variant as \`describe_model\` reports it, and the worker's GPU memory. ${ok} of ${f.models.length} ok, ${f.seconds} s, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    '| model | format | served vs in-process | variants (state, method, build time) | worker GPU MB | |',
    '| --- | --- | ---: | --- | ---: | --- |',
    ...rows,
    '',
  ].join('\n');
}
