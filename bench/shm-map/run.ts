/**
 * What mapping the input arena buys: one 3x224x224 float32 image (602112 bytes) moved into an
 * arena slot, by today's route (decode or read into a fresh Buffer, then a positioned writeSync
 * into the /dev/shm file) against filling the mapped slot in place (native/shm_map.c).
 *
 *   node --import tsx bench/shm-map/run.ts [--ops 2000] [--rounds 5] [--out FILE]
 *
 * Scenarios run interleaved in rounds, so that drift of the machine hits all alike. Per op: the
 * mean and percentiles of its wall time; minor page faults (process.resourceUsage: a fresh 600 KB
 * Buffer is fresh pages, faulted in one by one); GCs and GC pause time over the timed run
 * (v8.GCProfiler); and the ArrayBuffer bytes one op allocates, from process.memoryUsage() deltas
 * over a few ops right after a full GC (arrayBuffers counts backing stores Node allocated;
 * external also counts V8's external memory). The table goes to stdout and the results to
 * bench/results/shm-map-<time>.json (or --out FILE); `node --import tsx bench/report.ts` turns
 * them into docs/benchmarks.md, with each scenario's ratio against today's fs path for the same
 * input form (b64/fs or npy/fs), measured in the same run.
 */
import {
  closeSync,
  fstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { GCProfiler, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { arenaPath, InputArena } from '../../src/engines/torch/arena.js';
import { shmMapAvailable, shmMapUnavailableReason } from '../../src/engines/torch/shm-map.js';
import { encodeNpyHeader } from '../../src/tensor/npy.js';
import { machineInfo } from '../mcp-overhead/machine.js';
import { round } from '../mcp-overhead/stats.js';
import type { ShmMapResult, ShmMapRow, ShmMapScenarioId } from './results.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const t0 = performance.now();
// Taken before the run, so that its load average says how busy the machine was beforehand.
const machine = machineInfo(ROOT);

const { values: opts } = parseArgs({
  options: {
    ops: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '5' },
    out: { type: 'string' },
    /** Older name of --out. */
    json: { type: 'string' },
  },
});
const OPS = Number(opts.ops);
const ROUNDS = Number(opts.rounds);
const SHAPE = [1, 3, 224, 224];
const NBYTES = 3 * 224 * 224 * 4;
const WARMUP = 50;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const mapped = shmMapAvailable();
if (!mapped) process.stderr.write(`note: mmap unavailable (${shmMapUnavailableReason()}); mapped scenarios skipped\n`);

// Inputs: random float32 image as base64 and as a .npy file.
const image = Buffer.allocUnsafe(NBYTES);
const floats = new Float32Array(image.buffer, image.byteOffset, NBYTES / 4);
for (let i = 0; i < floats.length; i++) floats[i] = Math.random() * 2 - 1;
const b64 = image.toString('base64');
const dir = mkdtempSync(join(tmpdir(), 'tg-shm-bench-'));
const npyPath = join(dir, 'image.npy');
const npyHeader = encodeNpyHeader('float32', SHAPE);
writeFileSync(npyPath, Buffer.concat([npyHeader, image]));
const HEADER_BYTES = npyHeader.byteLength;

const fsArena = new InputArena(arenaPath('bench-fs'), NBYTES * 4, { mmap: false });
const mapArena = mapped ? new InputArena(arenaPath('bench-map'), NBYTES * 4, { mmap: true }) : undefined;

/** Reads the .npy file's data section straight into `into` (header parsing is the same either way). */
function readNpyInto(into: Buffer): void {
  const fd = openSync(npyPath, 'r');
  try {
    const size = fstatSync(fd).size;
    if (size - HEADER_BYTES !== into.byteLength) throw new Error('unexpected .npy size');
    let done = 0;
    while (done < into.byteLength) {
      const n = readSync(fd, into, done, into.byteLength - done, HEADER_BYTES + done);
      if (n === 0) throw new Error('short read');
      done += n;
    }
  } finally {
    closeSync(fd);
  }
}

interface Scenario {
  id: ShmMapScenarioId;
  name: string;
  what: string;
  arena?: InputArena;
  op: () => void;
}

const scenarios: Scenario[] = [
  {
    id: 'b64/decode-only',
    name: 'b64/decode-only',
    what: 'Buffer.from(b64, base64) alone, no arena (the floor of the decode)',
    op: () => {
      Buffer.from(b64, 'base64');
    },
  },
  {
    id: 'b64/fs',
    name: 'b64/fs (a, today)',
    arena: fsArena,
    what: 'Buffer.from(b64, base64) + arena.write (positioned writeSync)',
    op: () => fsArena.release(fsArena.write(Buffer.from(b64, 'base64'))),
  },
  {
    id: 'b64/fs-reserve',
    name: 'b64/fs reserve',
    arena: fsArena,
    what: 'fallback reserve(): view.write(b64) into a scratch Buffer + commit() (writeSync)',
    op: () => {
      const slot = fsArena.reserve(NBYTES);
      slot.view.write(b64, 'base64');
      slot.commit();
      fsArena.release(slot.offset);
    },
  },
  {
    id: 'npy/fs',
    name: 'npy/fs (c, today)',
    arena: fsArena,
    what: 'readFileSync(npy) + arena.write of the data section (writeSync)',
    op: () => fsArena.release(fsArena.write(readFileSync(npyPath).subarray(HEADER_BYTES))),
  },
];
if (mapArena) {
  scenarios.push(
    {
      id: 'b64/mmap',
      name: 'b64/mmap (b)',
      arena: mapArena,
      what: 'mapped reserve(): view.write(b64, base64) straight into the slot',
      op: () => {
        const slot = mapArena.reserve(NBYTES);
        slot.view.write(b64, 'base64');
        slot.commit();
        mapArena.release(slot.offset);
      },
    },
    {
      id: 'b64/mmap-write',
      name: 'b64/mmap write()',
      arena: mapArena,
      what: 'Buffer.from(b64, base64) + mapped arena.write (memcpy into the map)',
      op: () => mapArena.release(mapArena.write(Buffer.from(b64, 'base64'))),
    },
    {
      id: 'npy/mmap',
      name: 'npy/mmap (c)',
      arena: mapArena,
      what: 'mapped reserve(): open + readSync(fd, view) straight into the slot + close',
      op: () => {
        const slot = mapArena.reserve(NBYTES);
        readNpyInto(slot.view);
        slot.commit();
        mapArena.release(slot.offset);
      },
    },
  );
}

// Check that every arena scenario leaves the image's bytes in the file. The arena is empty
// between ops, so first-fit hands every op the slot at offset 0.
for (const s of scenarios) {
  if (!s.arena) continue;
  const zero = s.arena.reserve(NBYTES);
  if (zero.offset !== 0) throw new Error('arena not empty');
  zero.view.fill(0);
  zero.commit();
  s.arena.release(zero.offset);
  s.op();
  const got = Buffer.alloc(NBYTES);
  const fd = openSync(s.arena.path, 'r');
  readSync(fd, got, 0, NBYTES, 0);
  closeSync(fd);
  if (!got.equals(image)) throw new Error(`${s.name} left wrong bytes in the arena`);
}

// Allocation per op: ArrayBuffer bytes, over a short burst right after a full GC.
function allocationPerOp(s: Scenario, n = 8): { arrayBuffers: number; external: number } {
  gc();
  gc();
  const before = process.memoryUsage();
  for (let i = 0; i < n; i++) s.op();
  const after = process.memoryUsage();
  return {
    arrayBuffers: (after.arrayBuffers - before.arrayBuffers) / n,
    external: (after.external - before.external) / n,
  };
}

interface Tally {
  times: number[];
  gcs: number;
  gcMs: number;
  minorFaults: number;
}
const tallies = new Map<string, Tally>(scenarios.map((s) => [s.name, { times: [], gcs: 0, gcMs: 0, minorFaults: 0 }]));
for (const s of scenarios) for (let i = 0; i < WARMUP; i++) s.op();
const allocations = new Map(scenarios.map((s) => [s.name, allocationPerOp(s)]));

const perRound = Math.ceil(OPS / ROUNDS);
for (let round = 0; round < ROUNDS; round++) {
  for (const s of scenarios) {
    const tally = tallies.get(s.name) as Tally;
    gc();
    const profiler = new GCProfiler();
    profiler.start();
    const faults = process.resourceUsage().minorPageFault;
    for (let i = 0; i < perRound; i++) {
      const t0 = process.hrtime.bigint();
      s.op();
      tally.times.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
    tally.minorFaults += process.resourceUsage().minorPageFault - faults;
    const { statistics } = profiler.stop();
    tally.gcs += statistics.length;
    for (const g of statistics) tally.gcMs += g.cost / 1000; // cost is in microseconds
  }
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

const stats = new Map(
  scenarios.map((s) => {
    const t = tallies.get(s.name) as Tally;
    const sorted = [...t.times].sort((a, b) => a - b);
    const mean = t.times.reduce((x, y) => x + y, 0) / t.times.length;
    return [s.id, { t, mean, p50: percentile(sorted, 50), p99: percentile(sorted, 99) }];
  }),
);

const rows: ShmMapRow[] = scenarios.map((s) => {
  const { t, mean, p50, p99 } = stats.get(s.id) as NonNullable<ReturnType<typeof stats.get>>;
  const input = s.id.startsWith('npy/') ? 'npy' : 'b64';
  const baseline: ShmMapScenarioId = input === 'npy' ? 'npy/fs' : 'b64/fs';
  const base = stats.get(baseline);
  const alloc = allocations.get(s.name) as { arrayBuffers: number; external: number };
  return {
    id: s.id,
    scenario: s.name,
    what: s.what,
    input,
    arena: s.arena === undefined ? 'none' : s.arena.mapped ? 'mmap' : 'fs',
    baseline,
    ops: t.times.length,
    mean_us: round(mean, 2),
    p50_us: round(p50, 2),
    p99_us: round(p99, 2),
    p50_vs_baseline: base ? round(p50 / base.p50) : Number.NaN,
    mean_vs_baseline: base ? round(mean / base.mean) : Number.NaN,
    minor_faults_per_op: round(t.minorFaults / t.times.length, 2),
    gcs: t.gcs,
    gc_ms: round(t.gcMs, 2),
    array_buffer_bytes_per_op: Math.round(alloc.arrayBuffers),
    external_bytes_per_op: Math.round(alloc.external),
  };
});

const fmt = (n: number, d = 1) => n.toFixed(d);
const lines = [
  `payload: float32${JSON.stringify(SHAPE)} = ${NBYTES} bytes, ${b64.length} base64 characters; ${rows[0]?.ops} ops each in ${ROUNDS} rounds; ${process.version}`,
  '',
  '| scenario | what | mean µs | p50 µs | p99 µs | p50 vs today | page faults/op | GCs | GC ms | ArrayBuffer B/op | external B/op |',
  '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ...rows.map(
    (r) =>
      `| \`${r.scenario}\` | ${r.what} | ${fmt(r.mean_us)} | ${fmt(r.p50_us)} | ${fmt(r.p99_us)} | ${fmt(r.p50_vs_baseline, 2)}x | ${fmt(r.minor_faults_per_op)} | ${r.gcs} | ${fmt(r.gc_ms)} | ${fmt(r.array_buffer_bytes_per_op, 0)} | ${fmt(r.external_bytes_per_op, 0)} |`,
  ),
  '',
  'p50 vs today: against b64/fs (a) for b64 rows, npy/fs (c) for npy rows.',
];
process.stdout.write(`${lines.join('\n')}\n`);

const result: ShmMapResult = {
  benchmark: 'shm-map',
  date: new Date().toISOString(),
  profiled: false,
  machine,
  config: {
    shape: SHAPE,
    dtype: 'float32',
    nbytes: NBYTES,
    b64_chars: b64.length,
    ops: rows[0]?.ops ?? 0,
    rounds: ROUNDS,
    warmup: WARMUP,
    mapped,
    mmap_unavailable_reason: mapped ? null : (shmMapUnavailableReason() ?? 'unknown'),
    wall_s: round((performance.now() - t0) / 1000, 1),
  },
  rows,
};
const outOpt = opts.out ?? opts.json;
let out: string;
if (outOpt) {
  out = resolve(outOpt);
} else {
  const resultsDir = join(ROOT, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  out = join(resultsDir, `shm-map-${result.date.replace(/[:.]/g, '-')}.json`);
}
writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
process.stderr.write(`wrote ${out}\n`);

fsArena.close();
mapArena?.close();
rmSync(dir, { recursive: true, force: true });
