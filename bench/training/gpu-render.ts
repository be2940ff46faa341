/** What bench/training/gpu.py writes (training-gpu-<time>.json), and its docs/benchmarks.md section. */

interface ModeSummary {
  median_us: number | null;
  round_medians_us: number[];
  round_ratios: number[];
  vs_baseline: number | null;
  hook_median_us: number;
  synced: string | null;
  metrics_logged?: number;
  metrics_published?: number;
  dropped_metrics?: number;
}

export interface TrainingGpuFile {
  benchmark: 'training-gpu';
  date: string;
  device: string;
  gpu: string | null;
  torch: string;
  cpus: number;
  steps: number;
  rounds: Record<string, number>;
  before: boolean;
  seconds: number;
  loops: { loop: string; mlp: number[]; batch: number; modes: Record<string, ModeSummary> }[];
  micro: Record<string, { iterations: number; cost_us: number }>;
}

const WHAT: Record<string, string> = {
  none: 'the loop alone (baseline)',
  naive: '`loss.item()` every step, a 2 ms wait every 10 steps',
  none_acc: 'the loop computing its accuracy on the device (baseline of the two `_acc` rows)',
  sdk: '`run.log(step, loss=loss)` + `run.apply(optimizer, step)`',
  sdk_acc: '`run.log(step, loss=loss, accuracy=accuracy)` + `apply`',
  sdk_before: '`sdk` through the SDK before the staged metrics (the previous commit)',
  sdk_acc_before: '`sdk_acc` through the SDK before the staged metrics',
};

const fixed = (x: number | null | undefined, digits = 1) => (x === null || x === undefined ? '-' : x.toFixed(digits));
const percent = (ratio: number | null) =>
  ratio === null ? '-' : `${ratio >= 1 ? '+' : ''}${((ratio - 1) * 100).toFixed(1)}%`;

export function renderTrainingGpu(files: unknown[]): string {
  const f = files.at(-1) as TrainingGpuFile;
  const rounds = Object.entries(f.rounds)
    .map(([loop, n]) => `${loop}: ${n}`)
    .join(', ');
  const lines = [
    '## Training steering on a GPU (bench/training/gpu.py)',
    '',
    `\`python3 bench/training/gpu.py\` on \`${f.device}\` (${f.gpu ?? 'no GPU'}, torch ${f.torch}, ${f.cpus} CPUs): two MLP training loops (SGD with momentum, metrics as CUDA tensors), each mode run for ${f.steps} measured steps per round, the modes interleaved in rounds (${rounds}). "vs baseline" is the median over rounds of each round's median step against its own round's baseline; "in calls" is the median time spent in the mode's own calls per step, measured in place. The sdk modes run under \`torch.cuda.set_sync_debug_mode("error")\`, which raises on any synchronising call. ${f.seconds} s, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
  ];
  for (const loop of f.loops) {
    lines.push(
      `**${loop.loop}**: MLP ${loop.mlp.join('-')}, batch ${loop.batch}.`,
      '',
      '| mode | what runs | step (µs) | vs baseline | rounds (vs baseline) | in calls (µs) | sync | metrics published / logged |',
      '| --- | --- | ---: | ---: | --- | ---: | --- | ---: |',
    );
    for (const [mode, s] of Object.entries(loop.modes)) {
      const metrics = s.metrics_logged === undefined ? '-' : `${s.metrics_published} / ${s.metrics_logged}`;
      const ratios = s.round_ratios.map((r) => r.toFixed(2)).join(' ');
      const sync = mode.startsWith('sdk') ? (s.synced ? `**${s.synced}**` : 'none') : '-';
      lines.push(
        `| ${mode} | ${WHAT[mode] ?? mode} | ${fixed(s.median_us)} | ${percent(s.vs_baseline)} | ${ratios} | ${fixed(s.hook_median_us)} | ${sync} | ${metrics} |`,
      );
    }
    lines.push('');
  }
  const micro = Object.entries(f.micro)
    .map(([key, m]) => `${key === 'sdk' ? 'this SDK' : 'the SDK before'} ${m.cost_us.toFixed(2)} µs`)
    .join(', ');
  lines.push(
    `Alone (\`micro\`: \`log(loss, accuracy)\` + \`apply\` with CUDA tensors in a tight loop, ${Object.values(f.micro)[0]?.iterations ?? 0} iterations, minus an empty loop): ${micro} per step.`,
    '',
  );
  return lines.join('\n');
}
