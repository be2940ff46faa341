import type { TrainingResult } from './results.js';

/** The docs/benchmarks.md section of bench/training, rendered from its result files. */

const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
const header = (cells: string[], text = 1) => `${row(cells)}\n${row(cells.map((_, i) => (i < text ? '---' : '---:')))}`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const when = (date: string) => date.slice(0, 16).replace('T', ' ');
const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(1)}`;
const MODES = ['none', 'sdk_idle', 'sdk', 'naive'] as const;

const WHAT = {
  none: 'the loop alone (baseline)',
  sdk_idle:
    'tensorgate.train: `log(loss)` + `apply(optimizer)` every step; the server polls the run file at 10 Hz; no agent',
  sdk: 'the same, while an MCP agent (Streamable HTTP) calls `get_run` at 10 Hz and `set_hyperparameters` (lr, due at the next multiple of 10 steps) every 10 steps',
  naive:
    'the user report: `loss.item()` every step, an HTTP request every 10 steps whose reply (the lr) the loop waits for',
} as const;

function machineLine(r: TrainingResult): string {
  const m = r.machine;
  return `${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}; torch ${m.torch}; commit ${m.commit}; run ${when(r.date)} UTC`;
}

function sizeTable(size: TrainingResult['sizes'][number]): string[] {
  const lines = [
    `**${size.name}**: hidden ${size.hidden}, batch ${size.batch}, ${size.steps} measured steps per run.`,
    '',
    header(
      [
        'mode',
        'what runs',
        'step (µs)',
        'vs none',
        'overhead (µs)',
        'in-loop calls (µs)',
        'server CPU (% of a core)',
        'lr changes landed (per round)',
      ],
      2,
    ),
  ];
  for (const mode of MODES) {
    const m = size.modes[mode];
    lines.push(
      row([
        mode,
        WHAT[mode],
        m.median_us.toFixed(1),
        `${m.vs_none.toFixed(4)}x`,
        signed(m.overhead_us),
        median(m.runs.map((x) => x.hook_median_us)).toFixed(2),
        m.runs.map((x) => x.server_cpu_percent.toFixed(1)).join(' / '),
        mode === 'sdk' || mode === 'naive' ? m.runs.map((x) => x.lr_changes).join(' / ') : '',
      ]),
    );
  }
  lines.push('');
  return lines;
}

export function renderTraining(files: unknown[]): string {
  const runs = (files as TrainingResult[]).filter((r) => Array.isArray(r.sizes));
  const r = runs.at(-1);
  if (!r) return '## Training control plane (bench/training)\n\n_No results in the current format yet._\n';
  const lines = [
    '## Training control plane (bench/training)',
    '',
    `\`node --import tsx bench/training/run.ts\`: ${r.config.model}; after ${r.config.warmup} warm-up steps, ${r.config.rounds} rounds with the modes interleaved; per mode the median over rounds of each run's median step time. "In-loop calls" is the time of the mode's own calls each step, timed in place (for sdk: \`log\` + \`apply\`, with the caches cooled by the training step).` +
      (r.config.pinned
        ? ' The loop is pinned to the last core, the server and the driver (the agent) to the first, as a training job has its cores to itself on a real machine.'
        : ''),
    '',
    machineLine(r),
    '',
    ...r.sizes.flatMap(sizeTable),
    `SDK cost per step measured alone (log + apply in a tight loop of ${r.micro.iterations} steps, minus the empty loop): ` +
      `**${r.micro.float.cost_us.toFixed(2)} µs** with a Python float loss, **${r.micro.cpu_tensor.cost_us.toFixed(2)} µs** with a 0-d CPU tensor loss. ` +
      'In place, after a training step has pushed the SDK out of the CPU caches, the same calls take the "in-loop calls" time above; about 4 µs of it is torch reading the CPU loss tensor (`.item()`), which the naive mode pays too.',
    '',
    'Targets: sdk within 0.5% of none; the SDK at most 5 µs per step. On CUDA, see the next section (bench/training/gpu.py).',
    '',
  ];
  if (runs.length > 1) {
    lines.push('Earlier runs:', '');
    for (const old of runs.slice(0, -1).reverse()) {
      const parts = old.sizes.map((s) => `${s.name} sdk ${s.modes.sdk.vs_none.toFixed(4)}x`).join(', ');
      lines.push(
        `- ${when(old.date)} (commit ${old.machine.commit}): ${parts}; SDK ${old.micro.float.cost_us.toFixed(2)} µs/step`,
      );
    }
    lines.push('');
  }
  return lines.join('\n');
}
