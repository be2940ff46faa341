import type { ShmMapResult, ShmMapRow } from './results.js';

/** The docs/benchmarks.md section of bench/shm-map, rendered from its result files. */

const WHAT: Record<string, string> = {
  'b64/decode-only':
    "`Buffer.from(b64, 'base64')` into a fresh Buffer and nothing else: the floor of any base64 route.",
  'b64/fs':
    "today's fs path for base64 input (the baseline of the b64 rows): `Buffer.from(b64, 'base64')` into a " +
    'fresh Buffer, then `arena.write`, a positioned `writeSync` into the /dev/shm arena file.',
  'b64/fs-reserve':
    "the fs arena's `reserve()` fallback: base64 decoded with `view.write` into a fresh scratch Buffer, which " +
    '`commit()` then writes into the file with `writeSync`.',
  'npy/fs':
    "today's fs path for a .npy file (the baseline of the npy rows): `readFileSync` into a fresh Buffer, then " +
    '`arena.write` of its data section (`writeSync`).',
  'b64/mmap':
    "the mapped arena: `reserve()` returns a view of the shared memory and `view.write(b64, 'base64')` decodes " +
    'straight into the slot, with no intermediate Buffer and no syscall.',
  'b64/mmap-write':
    "`Buffer.from(b64, 'base64')`, then `arena.write` into the mapped arena (a memcpy instead of `writeSync`): " +
    'what dropping the syscall alone buys.',
  'npy/mmap':
    'the mapped arena: `reserve()`, then open + `readSync(fd, view)` of the data section straight into the slot + close.',
};

/** Table order: the base64 routes from the floor to the mapped slot, then the .npy routes. */
const ORDER = ['b64/decode-only', 'b64/fs', 'b64/fs-reserve', 'b64/mmap-write', 'b64/mmap', 'npy/fs', 'npy/mmap'];
const rank = (id: string) => (ORDER.includes(id) ? ORDER.indexOf(id) : ORDER.length);

const fixed = (x: number | undefined, digits = 1) => (x === undefined || Number.isNaN(x) ? '' : x.toFixed(digits));
const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
/** A table head; the first `text` columns are left-aligned, the rest (numbers) right-aligned. */
const header = (cells: string[], text = 1) => `${row(cells)}\n${row(cells.map((_, i) => (i < text ? '---' : '---:')))}`;
const when = (date: string) => date.slice(0, 16).replace('T', ' ');

function machineLine(r: ShmMapResult): string {
  const m = r.machine;
  return (
    `${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}; commit ${m.commit}; ` +
    `run ${when(r.date)} UTC`
  );
}

function ratio(r: ShmMapRow): string {
  if (r.id === r.baseline) return '1.00 (baseline)';
  const x = r.p50_vs_baseline;
  return Number.isNaN(x) ? '' : `${x.toFixed(2)}x`;
}

function table(r: ShmMapResult): string {
  const lines = [
    header(
      [
        'scenario',
        'p50 µs',
        'vs today (p50)',
        'mean µs',
        'p99 µs',
        'page faults/op',
        'GCs',
        'GC ms',
        'ArrayBuffer B/op',
      ],
      1,
    ),
  ];
  for (const x of r.rows) {
    lines.push(
      row([
        `\`${x.id}\``,
        fixed(x.p50_us),
        ratio(x),
        fixed(x.mean_us),
        fixed(x.p99_us),
        fixed(x.minor_faults_per_op),
        x.gcs,
        fixed(x.gc_ms),
        fixed(x.array_buffer_bytes_per_op, 0),
      ]),
    );
  }
  return lines.join('\n');
}

function historyTable(runs: ShmMapResult[]): string {
  const p50 = (r: ShmMapResult, id: string) => r.rows.find((x) => x.id === id)?.p50_us;
  const vs = (r: ShmMapResult, id: string) => r.rows.find((x) => x.id === id)?.p50_vs_baseline;
  const lines = [
    header(
      [
        'date (UTC)',
        'commit',
        'cores',
        'b64/fs p50 µs',
        'b64/mmap p50 µs',
        'b64/mmap vs today',
        'npy/fs p50 µs',
        'npy/mmap p50 µs',
        'npy/mmap vs today',
      ],
      2,
    ),
  ];
  for (const r of runs) {
    lines.push(
      row([
        when(r.date),
        r.machine.commit,
        r.machine.cores,
        fixed(p50(r, 'b64/fs')),
        fixed(p50(r, 'b64/mmap')),
        fixed(vs(r, 'b64/mmap'), 2),
        fixed(p50(r, 'npy/fs')),
        fixed(p50(r, 'npy/mmap')),
        fixed(vs(r, 'npy/mmap'), 2),
      ]),
    );
  }
  return lines.join('\n');
}

export function renderShmMap(files: unknown[]): string {
  const runs = (files as ShmMapResult[]).filter((r) => Array.isArray(r.rows) && r.config && !r.profiled);
  const latest = runs.at(-1);
  const parts = [
    '## Shared-memory input arena (`bench/shm-map`)',
    '',
    'What it costs the gateway to put one input tensor into its slot of the shared-memory input arena that ' +
      "the worker views: today's fs path (decode or read into a fresh Buffer, then a positioned `writeSync` " +
      'into the /dev/shm file) against filling the slot in place through the mmap addon (`native/shm_map.c`). ' +
      'One Node process, no MCP and no worker; the scenarios run interleaved in rounds, so that drift of the ' +
      'machine hits all alike, and each leaves the exact image bytes in the arena (checked before timing).',
    '',
  ];
  if (!latest) {
    parts.push('_No run in bench/results yet._', '');
    return parts.join('\n');
  }
  const cfg = latest.config;
  const rows = [...latest.rows].sort((a, b) => rank(a.id) - rank(b.id));
  const scenarios = rows.map((x) => `- \`${x.id}\`: ${WHAT[x.id] ?? x.what}`);
  parts.push(
    ...scenarios,
    '',
    "_vs today_ = the scenario's p50 / the p50 of today's fs path for the same input form, measured in the " +
      'same run (`b64/fs` for the b64 rows, `npy/fs` for the npy rows); below 1 is faster. _page faults/op_ = ' +
      'minor page faults per op (a fresh 600 KB Buffer is fresh pages, faulted in one by one); _GCs_ and _GC ms_ ' +
      `= collections and their pause time over all ${cfg.ops} timed ops; _ArrayBuffer B/op_ = backing-store bytes ` +
      'one op allocates (`process.memoryUsage().arrayBuffers` over a few ops right after a full GC).',
    '',
  );
  if (!cfg.mapped) {
    parts.push(
      `_The mmap addon was not available in this run (${cfg.mmap_unavailable_reason}), so the mapped ` +
        'scenarios are missing._',
      '',
    );
  }
  parts.push(
    `Machine: ${machineLine(latest)}.`,
    '',
    `Setup: input float32[${cfg.shape.join(', ')}] = ${cfg.nbytes} bytes, ${cfg.b64_chars} base64 characters; ` +
      `${cfg.ops} ops per scenario in ${cfg.rounds} rounds after ${cfg.warmup} warm-up ops; the run took ` +
      `${cfg.wall_s} s.`,
    '',
    table({ ...latest, rows }),
    '',
    'To rerun (the mapped scenarios need the addon, `build/Release/tensorgate_shm.node`):',
    '',
    '```sh',
    'npm run build:native',
    'node --import tsx bench/shm-map/run.ts [--ops 2000] [--rounds 5]  # writes bench/results/shm-map-<time>.json',
    'node --import tsx bench/report.ts',
    '```',
    '',
  );
  if (runs.length > 1) parts.push('### All shm-map runs in bench/results (oldest first)', '', historyTable(runs), '');
  return parts.join('\n');
}
