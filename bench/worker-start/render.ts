import type { WorkerStartResult, WorkerStartRow } from './results.js';

/** The docs/benchmarks.md section of bench/worker-start, rendered from its result files. */

const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
const header = (cells: string[], text = 1) => `${row(cells)}\n${row(cells.map((_, i) => (i < text ? '---' : '---:')))}`;
const when = (date: string) => date.slice(0, 16).replace('T', ' ');
const times = (a: number, b: number | undefined) => (b ? `${(a / b).toFixed(2)}x` : '');

function table(r: WorkerStartResult): string {
  const base = r.rows.find((x) => x.mode === 'spawn');
  const lines = [
    header(['workers', 'ready ms', 'restart p50 ms', 'restart max ms', 'CPU s', 'PSS MB', 'private MB', 'vs spawned']),
  ];
  const cells = (label: string, x: WorkerStartRow) => [
    label,
    x.ready_ms,
    x.restart_p50_ms,
    x.restart_max_ms,
    x.cpu_s,
    x.pss_mb,
    x.private_mb,
    x.mode === 'spawn' || !base
      ? 'baseline'
      : `ready ${times(x.ready_ms, base.ready_ms)}, restart ${times(x.restart_p50_ms, base.restart_p50_ms)}, ` +
        `PSS ${times(x.pss_mb, base.pss_mb)}, private ${times(x.private_mb, base.private_mb)}`,
  ];
  for (const x of r.rows) lines.push(row(cells(x.mode === 'spawn' ? 'spawned' : 'forked', x)));
  const server = r.rows.find((x) => x.fork_server)?.fork_server;
  if (server) {
    lines.push(row(['of which the fork server', '', '', '', server.cpu_s, server.pss_mb, server.private_mb, '']));
  }
  return lines.join('\n');
}

function historyTable(runs: WorkerStartResult[]): string {
  const lines = [
    header(
      [
        'date (UTC)',
        'commit',
        'cores',
        'spawned ready ms',
        'forked ready ms',
        'spawned restart ms',
        'forked restart ms',
      ],
      2,
    ),
  ];
  for (const r of runs) {
    const [s, f] = (['spawn', 'fork'] as const).map((m) => r.rows.find((x) => x.mode === m));
    lines.push(
      row([
        when(r.date),
        r.machine.commit,
        r.machine.cores,
        s?.ready_ms ?? '',
        f?.ready_ms ?? '',
        s?.restart_p50_ms ?? '',
        f?.restart_p50_ms ?? '',
      ]),
    );
  }
  return lines.join('\n');
}

export function renderWorkerStart(files: unknown[]): string {
  const runs = (files as WorkerStartResult[]).filter((r) => Array.isArray(r.rows) && r.config && !r.profiled);
  const latest = runs.at(-1);
  const parts = [
    '## Worker start (`bench/worker-start`)',
    '',
    'How fast a model version gets its workers, how fast a killed worker is replaced, and what the workers ' +
      'hold: each spawned as a new Python interpreter that imports torch, against each forked from a fork ' +
      'server that imported torch once ([worker-protocol.md](worker-protocol.md#fork-server)). A fresh ' +
      'in-process gateway per way registers the tabular demo model with several instances; _ready_ is that ' +
      "`register` (the forked row's includes starting the fork server). _restart_ kills each worker in turn " +
      'and times until the model answers again. _CPU s_, _PSS MB_ and _private MB_ are summed over the ' +
      'workers (and the fork server) once all are ready, from /proc/PID/stat and /proc/PID/smaps_rollup; PSS ' +
      'counts each shared page once across the processes sharing it, so it is the memory the group holds.',
    '',
  ];
  if (!latest) return [...parts, '_No run in bench/results yet._', ''].join('\n');
  const m = latest.machine;
  parts.push(
    `Machine: ${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}; commit ` +
      `${m.commit}; run ${when(latest.date)} UTC. Model \`${latest.config.model}\`, ` +
      `${latest.config.instances} instances; the run took ${latest.config.wall_s} s.`,
    '',
    table(latest),
    '',
    'To rerun:',
    '',
    '```sh',
    'node --import tsx bench/worker-start/run.ts [--instances 4]  # writes bench/results/worker-start-<time>.json',
    'node --import tsx bench/report.ts',
    '```',
    '',
  );
  if (runs.length > 1)
    parts.push('### All worker-start runs in bench/results (oldest first)', '', historyTable(runs), '');
  return parts.join('\n');
}
