/** What bench/training/gpu.py writes (training-gpu-<time>.json), and its docs/benchmarks.md section. */

interface ModeSummary {
  median_us: number | null;
  vs_baseline: number | null;
  /** method "blocks": the quartiles of the per-block ratios. */
  ratio_p25?: number | null;
  ratio_p75?: number | null;
  /** Runs before method "blocks": one ratio per round (a separate loop per round). */
  round_ratios?: number[];
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
  /** "blocks": every mode's loop in one process, taking turns in blocks of block_steps. */
  method?: 'blocks';
  block_steps?: number;
  blocks?: Record<string, number>;
  steps?: number;
  rounds?: Record<string, number>;
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
  const perLoop = (counts: Record<string, number> | undefined) =>
    Object.entries(counts ?? {})
      .map(([loop, n]) => `${loop}: ${n}`)
      .join(', ');
  const method =
    f.method === 'blocks'
      ? `every mode's loop built once in one process, the modes taking turns in blocks of ${f.block_steps} measured steps (after 10 unmeasured ones), blocks per mode ${perLoop(f.blocks)}. "vs baseline" is the median over blocks of each block's median step against the baseline's block of the same cycle, with the quartiles of those ratios`
      : `each mode run for ${f.steps} measured steps per round, the modes interleaved in rounds (${perLoop(f.rounds)}). "vs baseline" is the median over rounds of each round's median step against its own round's baseline`;
  const lines = [
    '## Training steering on a GPU (bench/training/gpu.py)',
    '',
    `\`python3 bench/training/gpu.py\` on \`${f.device}\` (${f.gpu ?? 'no GPU'}, torch ${f.torch}, ${f.cpus} CPUs): two MLP training loops (SGD with momentum, metrics as CUDA tensors), ${method}; "in calls" is the median time spent in the mode's own calls per step, measured in place. The sdk modes run under \`torch.cuda.set_sync_debug_mode("error")\`, which raises on any synchronising call. ${f.seconds} s, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
  ];
  for (const loop of f.loops) {
    lines.push(
      `**${loop.loop}**: MLP ${loop.mlp.join('-')}, batch ${loop.batch}.`,
      '',
      `| mode | what runs | step (µs) | vs baseline | ${f.method === 'blocks' ? 'quartiles' : 'rounds'} (vs baseline) | in calls (µs) | sync | metrics published / logged |`,
      '| --- | --- | ---: | ---: | --- | ---: | --- | ---: |',
    );
    for (const [mode, s] of Object.entries(loop.modes)) {
      const metrics = s.metrics_logged === undefined ? '-' : `${s.metrics_published} / ${s.metrics_logged}`;
      const ratios =
        f.method === 'blocks'
          ? `${fixed(s.ratio_p25, 3)} to ${fixed(s.ratio_p75, 3)}`
          : (s.round_ratios ?? []).map((r) => r.toFixed(2)).join(' ');
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
