import type { BatchingResult, CellResult, ModelKey } from './results.js';

/** The docs/benchmarks.md section of bench/batching, rendered from its result files. */

const fixed = (x: number | undefined, digits = 1) => (x === undefined || Number.isNaN(x) ? '' : x.toFixed(digits));
const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
/** A table head; the first `text` columns are left-aligned, the rest (numbers) right-aligned. */
const header = (cells: string[], text = 1) => `${row(cells)}\n${row(cells.map((_, i) => (i < text ? '---' : '---:')))}`;
const when = (date: string) => date.slice(0, 16).replace('T', ' ');
const MODELS: ModelKey[] = ['tabular', 'image'];

function machineLine(r: BatchingResult): string {
  const m = r.machine;
  return (
    `${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}; commit ${m.commit}; ` +
    `load average ${m.load_average_1m} before the run; run ${when(r.date)} UTC`
  );
}

function describeVariant(c: Pick<CellResult, 'variant' | 'batching'>): string {
  const b = c.batching;
  if (!b) return 'off';
  const preferred = b.preferred_batch_sizes?.length ? `, preferred ${b.preferred_batch_sizes.join('/')}` : '';
  return `max ${b.max_batch_size}, ${b.max_queue_delay_us / 1000} ms${preferred}`;
}

/** `64×410, 63×3`: forward passes by rows, the most frequent first (at most four, then the rest). */
function distributionText(batches: Record<string, number>): string {
  const entries = Object.entries(batches).sort((a, b) => b[1] - a[1]);
  const shown = entries.slice(0, 4).map(([rows, n]) => `${rows}×${n}`);
  const rest = entries.slice(4).reduce((a, [, n]) => a + n, 0);
  return shown.join(', ') + (rest > 0 ? `, other ${rest}` : '');
}

function modelTable(r: BatchingResult, key: ModelKey): string {
  const cells = r.cells.filter((c) => c.model === key);
  const best = r.best[key];
  const lines = [
    header(
      [
        'concurrency',
        'batching',
        'req/s',
        'vs off',
        'p50 ms',
        'p99 ms',
        'p99 bound ms',
        'rows/pass',
        'forward passes by rows',
        'compute p50 ms',
        'queue p50 ms',
        'worker busy %',
        'node CPU %',
        'workers CPU %',
        'GC % (longest ms)',
      ],
      2,
    ),
  ];
  const top = Math.max(...r.config.concurrency);
  for (const c of [...cells].sort((a, b) => a.concurrency - b.concurrency)) {
    const name = describeVariant(c) + (c.variant === best && c.concurrency === top ? ' **(best)**' : '');
    const bound =
      c.p99_bound_ms === undefined
        ? ''
        : `${fixed(c.p99_bound_ms, 2)}${c.latency.p99 <= c.p99_bound_ms ? '' : ' ✗'}${(c.waves ?? 1) > 1 ? ` (${c.waves} waves)` : ''}`;
    const errors = Object.entries(c.errors)
      .map(([code, n]) => `${n} ${code}`)
      .join(', ');
    lines.push(
      row([
        c.concurrency,
        name + (errors ? ` (errors: ${errors})` : ''),
        fixed(c.throughput_rps),
        c.ratio_vs_off === undefined ? '' : `${fixed(c.ratio_vs_off, 2)}x`,
        fixed(c.latency.p50, 2),
        fixed(c.latency.p99, 2),
        bound,
        fixed(c.mean_batch_rows, 1),
        distributionText(c.batches),
        fixed(c.compute_ms.p50, 2),
        fixed(c.queue_ms.p50, 2),
        fixed(c.forward_busy_pct, 0),
        fixed(c.node_cpu_pct, 0),
        fixed(c.workers_cpu_pct, 0),
        c.gc_pct === undefined ? '' : `${fixed(c.gc_pct, 1)} (${fixed(c.gc_max_ms, 1)})`,
      ]),
    );
  }
  return lines.join('\n');
}

/** Share of a batched cell's forward passes with fewer rows than its clients could have filled. */
function partialShare(c: CellResult): { share: number; fillable: number } | undefined {
  if (!c.batching || c.forward_passes === 0) return undefined;
  const fillable = Math.min(c.concurrency, c.batching.max_batch_size);
  const partial = Object.entries(c.batches).reduce((a, [rows, n]) => a + (Number(rows) < fillable ? n : 0), 0);
  return { share: partial / c.forward_passes, fillable };
}

/** Observations computed from the figures: where each model's throughput ends, and split batches. */
function limits(r: BatchingResult): string {
  const out: string[] = [];
  const top = Math.max(...r.config.concurrency);
  const usPerAnswer = (c: CellResult) => (10 * c.node_cpu_pct * 1000) / Math.max(1, c.throughput_rps);
  const bound = (c: CellResult) =>
    c.forward_busy_pct >= 85
      ? `the forward pass (the worker computes ${fixed(c.forward_busy_pct, 0)}% of the time)`
      : c.node_cpu_pct >= 85
        ? `the Node process: ${fixed(c.node_cpu_pct, 0)}% of a core for gateway and clients, ${fixed(usPerAnswer(c), 0)} µs of CPU per answer, while forward passes fill ${fixed(c.forward_busy_pct, 0)}% of the time`
        : `the round trip to the worker: node ${fixed(c.node_cpu_pct, 0)}% and workers ${fixed(c.workers_cpu_pct, 0)}% of a core, forward passes ${fixed(c.forward_busy_pct, 0)}% of the time, each side waiting for the other`;
  for (const key of MODELS) {
    const off = r.cells.find((c) => c.model === key && !c.batching && c.concurrency === top);
    const on = r.cells.find((c) => c.model === key && c.variant === r.best[key] && c.concurrency === top);
    if (!off || !on) continue;
    let line = `- ${key}, concurrency ${top}: unbatched, throughput is bound by ${bound(off)}; with \`${on.variant}\`, by ${bound(on)}.`;
    if (off.forward_busy_pct >= 85) {
      const perRowOff = off.compute_ms.p50 / Math.max(1, off.mean_batch_rows);
      const perRowOn = on.compute_ms.p50 / Math.max(1, on.mean_batch_rows);
      const ceiling = perRowOff / perRowOn / (off.forward_busy_pct / 100);
      line +=
        ` The forward pass costs ${fixed(perRowOff, 2)} ms per row alone and ${fixed(perRowOn, 2)} ms per row in ` +
        `batches of ${fixed(on.mean_batch_rows, 1)}: batching saves only that and the worker's idle time, so it ` +
        `cannot pass ${fixed(ceiling, 2)}x here (measured ${fixed(on.ratio_vs_off, 2)}x).`;
    }
    const alone = r.cells.find(
      (c) => c.model === key && !c.batching && c.concurrency === Math.min(...r.config.concurrency),
    );
    if (alone && on.p99_bound_ms !== undefined && on.batching) {
      const slack = on.p99_bound_ms - on.batching.max_queue_delay_us / 1000 - on.compute_ms.p50;
      const outside = alone.latency.p50 - alone.compute_ms.p50;
      if (outside > slack) {
        line +=
          ` The p99 bound leaves ${fixed(slack, 2)} ms beyond the delay and one forward pass, but an unbatched ` +
          `call on an idle gateway already spends ${fixed(outside, 2)} ms outside the forward pass (decoding, the ` +
          `round trip to the worker, encoding)` +
          (on.gc_pct > 5
            ? `, and garbage collection takes ${fixed(on.gc_pct, 0)}% of the time here, in pauses up to ${fixed(on.gc_max_ms, 1)} ms.`
            : '.');
      }
    }
    out.push(line);
  }
  for (const c of r.cells) {
    if (!c.batching || c.concurrency !== 1) continue;
    const delay = c.batching.max_queue_delay_us / 1000;
    if (delay < 1 && c.queue_ms.p50 > delay + 0.2) {
      out.push(
        `- ${c.model}, \`${c.variant}\`, one client: a lone call waits ${fixed(c.queue_ms.p50, 2)} ms (p50) in the ` +
          `queue for a configured delay of ${fixed(delay, 2)} ms: the batch timer cannot fire sooner than about 1 ms.`,
      );
    }
  }
  for (const c of r.cells) {
    const p = partialShare(c);
    if (!p || p.share < 0.05) continue;
    out.push(
      `- ${c.model}, \`${c.variant}\`, concurrency ${c.concurrency}: ${fixed(100 * p.share, 0)}% of the forward passes ` +
        `had fewer than the ${p.fillable} rows its clients could fill (${distributionText(c.batches)}).`,
    );
  }
  return out.join('\n');
}

function targetsTable(r: BatchingResult): string {
  const lines = [header(['target', 'goal', 'how it is computed', 'measured', 'met'], 3)];
  for (const [name, t] of Object.entries(r.targets)) {
    lines.push(row([`\`${name}\``, t.target, t.detail, fixed(t.measured, 2), t.met ? 'yes' : '**no**']));
  }
  return lines.join('\n');
}

function historyTable(runs: BatchingResult[]): string {
  const top = (r: BatchingResult) => Math.max(...r.config.concurrency);
  const cell = (r: BatchingResult, key: ModelKey, variant: string | undefined) =>
    r.cells.find((c) => c.model === key && c.variant === variant && c.concurrency === top(r));
  const lines = [
    header(
      [
        'date (UTC)',
        'commit',
        'cores',
        'tabular best',
        'tabular req/s off / on',
        'tabular vs off',
        'image best',
        'image req/s off / on',
        'image vs off',
      ],
      2,
    ),
  ];
  for (const r of runs) {
    const parts: (string | number)[] = [when(r.date), r.machine.commit, r.machine.cores];
    for (const key of MODELS) {
      const on = cell(r, key, r.best[key]);
      const off = cell(r, key, 'off');
      parts.push(
        r.best[key] ?? '',
        on && off ? `${fixed(off.throughput_rps, 0)} / ${fixed(on.throughput_rps, 0)}` : '',
        on?.ratio_vs_off === undefined ? '' : `${fixed(on.ratio_vs_off, 2)}x`,
      );
    }
    lines.push(row(parts));
  }
  return lines.join('\n');
}

export function renderBatching(files: unknown[]): string {
  const runs = (files as BatchingResult[]).filter((r) => Array.isArray(r.cells) && r.config && !r.profiled);
  // The headline is the newest run that measured both models (a partial --only run is history only).
  const complete = runs.filter((r) => MODELS.every((k) => r.cells.some((c) => c.model === k)));
  const latest = complete.at(-1) ?? runs.at(-1);
  const parts = [
    '## Dynamic batching (`bench/batching`)',
    '',
    'What dynamic batching buys under concurrent load: closed-loop clients (each sends its next call as soon ' +
      'as its last one is answered) at several concurrencies, against the small tabular model (one row per ' +
      'call) and the image model (version 1, one image per call), unbatched and with each batching setting, ' +
      'all in the same run. The gateway runs **in the benchmark process** (`Gateway.infer`, with its real ' +
      'Python workers and shared memory) and **without the MCP transport**, so what is measured is the ' +
      'gateway pipeline and the scheduler, not JSON-RPC; over MCP every call costs more on the Node side ' +
      '(see the MCP overhead section). Each setting is a renamed copy of the demo model with that `batching` ' +
      "section, version 1 only, and one model's pools run at a time. Per concurrency the settings run " +
      'interleaved in rounds; each block has a warm-up, then a window that starts and ends at an answer, and ' +
      'blocks disturbed by other processes are measured again.',
    '',
    '_req/s_ = answers in the windows / their length; _vs off_ = req/s / the unbatched req/s at the same ' +
      'concurrency, same run. _p99 bound_ = `max_queue_delay` + 2 x the p50 `compute_ms` of the batches ' +
      "(the issue's latency target; ✗ = p99 above it). _waves_ = ceil(concurrency / max_batch_size): with " +
      'more clients than rows in a batch, a call waits for that many forward passes however it is scheduled ' +
      "(Little's law), so the bound cannot hold there. _rows/pass_ and _forward passes by rows_ come from the " +
      "pool's batch-size histogram (`poolStats().batches`) over the windows; _compute_ and _queue_ are the " +
      "server's per-call stage timings (compute = the whole batch's forward pass); _worker busy_ = share of " +
      'the window the worker spent in forward passes; _node CPU_ / _workers CPU_ = CPU used meanwhile by the ' +
      'benchmark process (gateway and clients, all threads) and by its Python workers, in % of one core; ' +
      '_GC_ = share of the windows this process spent in garbage collection, and its longest pause. _best_ = ' +
      'the batched setting with the highest throughput at the highest concurrency; the targets use it.',
    '',
  ];
  if (!latest) {
    parts.push('_No run in bench/results yet._', '');
    return parts.join('\n');
  }
  const cfg = latest.config;
  parts.push(`Machine: ${machineLine(latest)}.`, '');
  const setup = MODELS.filter((k) => cfg.models[k]).map((k) => {
    const m = cfg.models[k];
    const variants = cfg.variants
      .filter((v) => v.model === k && v.batching)
      .map((v) => `\`${JSON.stringify(v.batching)}\``)
      .join(', ');
    return (
      `- ${k}: \`${m.name}@${m.version}\` (${m.threads} thread${m.threads === 1 ? '' : 's'}, ${m.instances} ` +
      `instance${m.instances === 1 ? '' : 's'}), input \`${m.input.name}\` float32[${m.input.shape.join(', ')}] ` +
      `(${m.input.bytes} bytes) sent as ${m.input.form === 'array' ? 'a nested JSON array' : m.input.form === 'path' ? 'a `{path}` to a .npy file' : '`{b64}`'}; ` +
      `${cfg.seconds[k]} s measured per cell; batching settings ${variants}.`
    );
  });
  parts.push(
    'Setup:',
    '',
    ...setup,
    '',
    `Concurrency ${cfg.concurrency.join(', ')}; ${cfg.rounds} rounds per cell, at least ${cfg.warmup_s} s of ` +
      `warm-up per block; the run took ${cfg.wall_s} s.`,
    '',
  );
  for (const key of MODELS) {
    if (!latest.cells.some((c) => c.model === key)) continue;
    parts.push(`### ${key === 'tabular' ? 'Tabular model' : 'Image model'}`, '', modelTable(latest, key), '');
  }
  parts.push('### Targets (issue 3)', '', targetsTable(latest), '');
  const observed = limits(latest);
  if (observed) parts.push('### What limits throughput (computed from the tables above)', '', observed, '');
  parts.push(
    'To rerun:',
    '',
    '```sh',
    'node --import tsx bench/batching/run.ts  # about 4 minutes on 2 cores; writes bench/results/batching-<time>.json',
    'node --import tsx bench/report.ts',
    '```',
    '',
  );
  if (runs.length > 1) parts.push('### All batching runs in bench/results (oldest first)', '', historyTable(runs), '');
  return parts.join('\n');
}
