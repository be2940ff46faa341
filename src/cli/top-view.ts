import type { ServerSnapshot, VersionSnapshot, WorkerSnapshot } from '../metrics/snapshot.js';

/**
 * What `tensorgate top` shows, as lines of text: a header (uptime, rates, totals, GPUs), one row
 * per model version, and the training runs. Pure: a snapshot and a terminal size in, lines out,
 * so the layout is tested without a terminal or a server. Columns that do not fit the width are
 * left out, least useful first; colours are ANSI SGR codes and only added when asked for.
 */

export interface TopViewOptions {
  /** Terminal columns; no line is longer. */
  width: number;
  /** Terminal rows; when given, the view is cut to fit and says how much was left out. */
  height?: number;
  color?: boolean;
  /** A last line (where the figures come from, how to quit), kept when the view is cut. */
  footer?: string;
}

interface Segment {
  text: string;
  /** SGR parameters, e.g. "1" bold, "31" red. */
  sgr?: string;
}

type Line = Segment[];

interface Row {
  name: string;
  v: VersionSnapshot;
}

interface Column {
  title: string;
  align: 'left' | 'right';
  /** Kept longer when the terminal is narrow: columns go lowest first. */
  priority: number;
  /** At most this wide (longer cells end in …). */
  max?: number;
  /** Shrinks (down to MIN_NAME) before any column is left out. */
  flexible?: boolean;
  cell: (row: Row) => Segment;
}

const STATE_SGR: Record<string, string> = {
  ready: '32',
  loading: '33',
  unloading: '33',
  failed: '31',
  unloaded: '2',
};
const RUN_STATE_SGR: Record<string, string> = {
  running: '32',
  starting: '33',
  paused: '33',
  stopped: '2',
  finished: '2',
  exited: '31',
};
const WORK_STAGES = ['decode', 'preprocess', 'queue', 'transfer', 'compute', 'postprocess', 'encode'] as const;
const GAP = '  ';
const MIN_NAME = 16;
/** Columns below this priority are left out before model names are shortened. */
const NAME_OVER_PRIORITY = 5;
const MAX_ERRORS = 26;

export function renderTop(snapshot: ServerSnapshot, options: TopViewOptions): string[] {
  const width = Math.max(20, options.width);
  const lines: Line[] = [...header(snapshot), [], ...modelTable(snapshot, width)];
  if (snapshot.training.length > 0) lines.push([], ...trainingTable(snapshot));
  if (snapshot.jobs.length > 0) lines.push([], ...jobsTable(snapshot));
  const footer: Line[] = options.footer ? [[], [{ text: options.footer, sgr: '2' }]] : [];
  if (options.height !== undefined && lines.length + footer.length > options.height) {
    const room = Math.max(1, options.height - footer.length - 1);
    const hidden = lines.length - room;
    lines.splice(room, hidden, [{ text: `… ${hidden} more lines (a taller terminal shows them)`, sgr: '2' }]);
  }
  return [...lines, ...footer].map((line) => paint(line, width, options.color === true));
}

function header(s: ServerSnapshot): Line[] {
  const versions = s.models.flatMap((m) => m.versions);
  let requests = s.unattributed.failed;
  let failed = s.unattributed.failed;
  let rps = 0;
  let ok = 0;
  let failures = 0;
  let inferences = 0;
  const states = new Map<string, number>();
  for (const v of versions) {
    requests += v.window.requests;
    failed += v.window.failed;
    rps += v.window.throughput_rps;
    ok += v.totals.success;
    failures += v.totals.failure;
    inferences += v.totals.inferences;
    states.set(v.state, (states.get(v.state) ?? 0) + 1);
  }
  const byState = [...states].map(([state, n]) => `${n} ${state}`).join(', ');
  const errorRate = requests === 0 ? 0 : failed / requests;
  const lines: Line[] = [
    [
      { text: `tensorgate ${s.tensorgate}`, sgr: '1' },
      {
        text: ` · up ${duration(s.uptime_s)} · ${count(s.models.length, 'model')}, ${count(versions.length, 'version')}`,
      },
      { text: byState ? ` (${byState})` : '' },
    ],
    [
      { text: `last ${Math.round(s.window_s)} s: ${rate(rps)} req/s, ` },
      { text: `${percent(errorRate)} errors`, ...(failed > 0 ? { sgr: '31' } : {}) },
      { text: ` · since start: ${ok} ok, ${failures} failed, ${inferences} inferences` },
    ],
  ];
  if (s.unattributed.failed > 0) {
    lines.push([
      { text: 'no model: ' },
      { text: `${s.unattributed.failed} failed`, sgr: '31' },
      { text: ` (${codes(s.unattributed.top_errors)}): unknown models or malformed requests` },
    ]);
  }
  for (const gpu of s.gpus ?? []) {
    lines.push([
      { text: `GPU ${gpu.index} ${gpu.name}: ` },
      { text: `${Math.round(gpu.utilization * 100)}% busy`, ...(gpu.utilization >= 0.9 ? { sgr: '33' } : {}) },
      { text: `, ${gib(gpu.memory_used_bytes)}/${gib(gpu.memory_total_bytes)} GiB` },
    ]);
  }
  return lines;
}

const COLUMNS: Column[] = [
  { title: 'MODEL@VERSION', align: 'left', priority: 10, flexible: true, cell: (r) => ({ text: r.name }) },
  {
    title: 'STATE',
    align: 'left',
    priority: 10,
    cell: ({ v }) => ({ text: v.state, ...(STATE_SGR[v.state] ? { sgr: STATE_SGR[v.state] as string } : {}) }),
  },
  { title: 'DEVICE', align: 'left', priority: 3, cell: ({ v }) => ({ text: v.device ?? '-' }) },
  { title: 'INST', align: 'right', priority: 8, cell: ({ v }) => ({ text: `${v.busy}/${v.instances}` }) },
  {
    title: 'QUEUE',
    align: 'right',
    priority: 7,
    cell: ({ v }) => ({ text: String(v.queued), ...(v.queued > 0 ? { sgr: '33' } : {}) }),
  },
  { title: 'REQ/S', align: 'right', priority: 9, cell: ({ v }) => ({ text: rate(v.window.throughput_rps) }) },
  { title: 'P50 MS', align: 'right', priority: 7, cell: ({ v }) => latency(v, 'p50') },
  { title: 'P90 MS', align: 'right', priority: 5, cell: ({ v }) => latency(v, 'p90') },
  { title: 'P99 MS', align: 'right', priority: 9, cell: ({ v }) => latency(v, 'p99') },
  { title: 'ERR%', align: 'left', priority: 8, max: MAX_ERRORS, cell: ({ v }) => errors(v) },
  {
    title: 'BATCH',
    align: 'right',
    priority: 5,
    cell: ({ v }) => ({ text: v.window.succeeded > 0 ? v.window.batch_size_avg.toFixed(1) : '-' }),
  },
  {
    title: 'MEM',
    align: 'right',
    priority: 5,
    cell: ({ v }) => ({ text: memory(v, (w) => w.pss_bytes ?? w.rss_bytes) }),
  },
  { title: 'GPU MEM', align: 'right', priority: 2, cell: ({ v }) => ({ text: memory(v, (w) => w.gpu_memory_bytes) }) },
  {
    title: 'RESTARTS',
    align: 'right',
    priority: 3,
    cell: ({ v }) => ({ text: String(v.restarts), ...(v.restarts > 0 ? { sgr: '33' } : {}) }),
  },
  { title: 'TOP STAGE', align: 'left', priority: 4, cell: ({ v }) => ({ text: dominantStage(v) }) },
];

function modelTable(s: ServerSnapshot, width: number): Line[] {
  const rows: Row[] = s.models.flatMap((m) => m.versions.map((v) => ({ name: `${m.name}@${v.version}`, v })));
  if (rows.length === 0) return [[{ text: 'no models registered', sgr: '2' }]];
  const hasGpu = rows.some(({ v }) => v.workers.some((w) => w.gpu_memory_bytes !== undefined));
  let columns = COLUMNS.filter((c) => c.title !== 'GPU MEM' || hasGpu);
  const cells = new Map(columns.map((c) => [c, rows.map((r) => c.cell(r))]));
  const widths = new Map(
    columns.map((c) => {
      const widest = Math.max(c.title.length, ...(cells.get(c) ?? []).map((x) => x.text.length));
      return [c, Math.min(c.max ?? widest, widest)];
    }),
  );
  const total = () => columns.reduce((sum, c) => sum + (widths.get(c) ?? 0), 0) + GAP.length * (columns.length - 1);
  const dropUntil = (keep: number) => {
    while (total() > width && columns.length > 2) {
      // The least useful column goes first; of equals, the rightmost.
      let drop = columns[columns.length - 1] as Column;
      for (const c of columns) if (c.priority <= drop.priority) drop = c;
      if (drop.priority >= keep) return;
      columns = columns.filter((c) => c !== drop);
    }
  };
  // Whole names matter more than the extras; the main figures matter more than whole names.
  dropUntil(NAME_OVER_PRIORITY);
  for (const c of columns) {
    const over = total() - width;
    const w = widths.get(c) ?? 0;
    if (c.flexible && over > 0) widths.set(c, Math.max(Math.min(MIN_NAME, w), w - over));
  }
  dropUntil(Number.POSITIVE_INFINITY);
  const row = (texts: Segment[]): Line =>
    texts.flatMap((seg, i) => {
      const c = columns[i] as Column;
      const w = widths.get(c) ?? 0;
      const last = i === columns.length - 1;
      const text = clip(seg.text, w);
      const padded = last && c.align === 'left' ? text : c.align === 'left' ? text.padEnd(w) : text.padStart(w);
      return [...(i > 0 ? [{ text: GAP }] : []), { ...seg, text: padded }];
    });
  const out: Line[] = [row(columns.map((c) => ({ text: c.title, sgr: '1' })))];
  rows.forEach((r, i) => {
    out.push(row(columns.map((c) => (cells.get(c) ?? [])[i] as Segment)));
    if (r.v.state === 'failed' && r.v.error) out.push([{ text: `  └ ${r.v.error}`, sgr: '31' }]);
  });
  return out;
}

function trainingTable(s: ServerSnapshot): Line[] {
  const runs = s.training;
  const nameW = Math.max(3, ...runs.map((r) => r.name.length));
  const stateW = Math.max(5, ...runs.map((r) => r.state.length));
  const stepW = Math.max(4, ...runs.map((r) => String(r.step).length));
  const out: Line[] = [
    [
      {
        text: ['RUN'.padEnd(nameW), 'STATE'.padEnd(stateW), 'STEP'.padStart(stepW), 'RANKS', 'LATEST'].join(GAP),
        sgr: '1',
      },
    ],
  ];
  for (const run of runs) {
    const metrics = Object.keys(run.latest)
      .sort((a, b) => (a === 'loss' ? -1 : b === 'loss' ? 1 : a.localeCompare(b)))
      .map((k) => `${k} ${number(run.latest[k] as number)}`)
      .join(', ');
    const sgr = RUN_STATE_SGR[run.state];
    out.push([
      { text: `${run.name.padEnd(nameW)}${GAP}` },
      { text: run.state.padEnd(stateW), ...(sgr ? { sgr } : {}) },
      { text: `${GAP}${String(run.step).padStart(stepW)}${GAP}${String(run.world_size).padStart(5)}${GAP}${metrics}` },
    ]);
  }
  return out;
}

/** The batch jobs running: a line each with its progress, pace and ETA. */
function jobsTable(s: ServerSnapshot): Line[] {
  const runs = (j: ServerSnapshot['jobs'][number]) => j.model ?? `${j.workflow} (workflow)`;
  const modelW = Math.max(5, ...s.jobs.map((j) => runs(j).length));
  const out: Line[] = [
    [{ text: ['JOB     ', 'RUNS'.padEnd(modelW), 'DONE', 'FAILED', 'ITEMS/S', 'ETA'].join(GAP), sgr: '1' }],
  ];
  for (const job of s.jobs) {
    const failed = job.failed > 0 ? { text: String(job.failed).padStart(6), sgr: '31' } : { text: '0'.padStart(6) };
    out.push([
      { text: `${job.id.slice(0, 8)}${GAP}${runs(job).padEnd(modelW)}${GAP}${job.done}/${job.items}${GAP}` },
      failed,
      {
        text: `${GAP}${job.items_per_second !== undefined ? number(job.items_per_second) : '-'}${GAP}${job.eta_s !== undefined ? `${job.eta_s} s` : '-'}`,
      },
    ]);
  }
  return out;
}

function latency(v: VersionSnapshot, q: 'p50' | 'p90' | 'p99'): Segment {
  return { text: v.window.succeeded > 0 ? ms(v.window.latency_ms[q]) : '-' };
}

function errors(v: VersionSnapshot): Segment {
  const w = v.window;
  if (w.requests === 0) return { text: '-' };
  if (w.failed === 0) return { text: '0%' };
  const top = w.top_errors[0];
  return { text: `${percent(w.error_rate)}${top ? ` ${top.code}` : ''}`, sgr: '31' };
}

/**
 * A figure of the version's workers, summed. MEM is their proportional set size (resident memory
 * where it cannot be read): resident memory counts the pages forked workers share with their
 * fork server once in each of them.
 */
function memory(v: VersionSnapshot, of: (w: WorkerSnapshot) => number | undefined): string {
  if (v.workers.length === 0) return '-';
  return bytes(v.workers.reduce((sum, w) => sum + (of(w) ?? 0), 0));
}

/** The stage that took the largest share of the mean request, e.g. "compute 62%". */
export function dominantStage(v: VersionSnapshot): string {
  const total = v.window.stages_ms.total.mean;
  if (v.window.succeeded === 0 || total <= 0) return '-';
  let best: (typeof WORK_STAGES)[number] = 'compute';
  for (const stage of WORK_STAGES) if (v.window.stages_ms[stage].mean > v.window.stages_ms[best].mean) best = stage;
  return `${best} ${Math.round((100 * v.window.stages_ms[best].mean) / total)}%`;
}

function paint(line: Line, width: number, color: boolean): string {
  let out = '';
  let room = width;
  for (const seg of line) {
    if (room <= 0) break;
    const text = clip(seg.text, room);
    room -= [...text].length;
    out += color && seg.sgr ? `\x1b[${seg.sgr}m${text}\x1b[0m` : text;
  }
  return color ? out : out.trimEnd();
}

function clip(text: string, width: number): string {
  const chars = [...text];
  return chars.length <= width ? text : `${chars.slice(0, Math.max(0, width - 1)).join('')}…`;
}

function codes(top: { code: string; count: number }[]): string {
  return top.map((e) => `${e.code} ${e.count}`).join(', ');
}

function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** "42s", "5m07s", "1h02m", "3d04h". */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s`;
  const two = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m${two(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${two(Math.floor(s / 60) % 60)}m`;
  return `${Math.floor(s / 86400)}d${two(Math.floor(s / 3600) % 24)}h`;
}

export function rate(x: number): string {
  if (x === 0) return '0';
  if (x < 10) return x.toFixed(2);
  if (x < 100) return x.toFixed(1);
  if (x < 10_000) return x.toFixed(0);
  return `${(x / 1000).toFixed(1)}k`;
}

export function ms(x: number): string {
  if (x < 10) return x.toFixed(2);
  if (x < 100) return x.toFixed(1);
  if (x < 10_000) return x.toFixed(0);
  return `${(x / 1000).toFixed(1)}s`;
}

function percent(ratio: number): string {
  const p = ratio * 100;
  if (p === 0) return '0%';
  return `${p < 10 ? p.toFixed(1) : p.toFixed(0)}%`;
}

export function bytes(b: number): string {
  if (b < 1024 * 1024) return `${Math.round(b / 1024)}K`;
  if (b < 1024 ** 3) return `${Math.round(b / 1024 ** 2)}M`;
  return `${(b / 1024 ** 3).toFixed(1)}G`;
}

function gib(b: number): string {
  return (b / 1024 ** 3).toFixed(1);
}

function number(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (x !== 0 && (Math.abs(x) >= 1e5 || Math.abs(x) < 1e-4)) return x.toExponential(2);
  return String(Number(x.toPrecision(4)));
}
