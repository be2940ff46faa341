import type { MachineInfo } from '../mcp-overhead/machine.js';
import type { SoakResult } from './soak.js';

/** What bench/soak/run.ts writes, and its docs/benchmarks.md section. */

export interface SoakFile {
  benchmark: 'soak';
  date: string;
  machine: MachineInfo;
  config: { requests: number; concurrency: number; kill_every_s: number; instances: number };
  result: SoakResult;
}

const BARS = '▁▂▃▄▅▆▇█';

/** The RSS samples as a one-line sparkline, scaled between their min and max. */
function sparkline(values: number[]): string {
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  return values.map((v) => BARS[hi > lo ? Math.round(((v - lo) / (hi - lo)) * (BARS.length - 1)) : 0]).join('');
}

export function renderSoak(files: unknown[]): string {
  const f = files.at(-1) as SoakFile;
  const r = f.result;
  const m = f.machine;
  const rss = r.rss_mib.map(([, mib]) => mib);
  // Memory is stable when the second half of the run peaks no higher than the first: garbage
  // collection makes single samples swing, so peaks are compared rather than start and end.
  const half = Math.floor(rss.length / 2);
  const peakFirst = Math.max(...rss.slice(0, half));
  const peakSecond = Math.max(...rss.slice(half));
  const every = Math.max(1, Math.ceil(r.rss_mib.length / 12));
  const samples = r.rss_mib.filter((_, i) => i % every === 0 || i === r.rss_mib.length - 1);
  const fmt = (o: Record<string, number>) =>
    Object.entries(o)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none';
  return [
    '## Fault soak (bench/soak)',
    '',
    `\`node --import tsx bench/soak/run.ts\`: ${f.config.requests} OIP v2 requests (JSON, the tabular model, ${f.config.instances} worker instances) from ${f.config.concurrency} closed-loop clients while a worker is SIGKILLed every ${f.config.kill_every_s} s. ${m.cores} cores (${m.cpu_model}), Node ${m.node}, commit ${m.commit}, run ${f.date.slice(0, 16).replace('T', ' ')} UTC.`,
    '',
    '| requests | answered ok | retryable errors | other errors | hung | workers killed | duration s | server RSS start → end MiB |',
    '| ---: | ---: | --- | --- | ---: | ---: | ---: | --- |',
    `| ${r.requests} | ${r.ok} | ${fmt(r.retryable)} | ${fmt(r.other)} | ${r.hung} | ${r.kills} | ${r.duration_s} | ${rss[0]} → ${rss.at(-1)} (min ${Math.min(...rss)}, max ${Math.max(...rss)}) |`,
    '',
    `Server RSS, once a second: \`${sparkline(rss)}\`; peak ${peakFirst} MiB in the first half of the run, ${peakSecond} MiB in the second (${peakSecond <= peakFirst * 1.1 ? 'stable' : 'still growing'}).`,
    '',
    '| s | RSS MiB |',
    '| ---: | ---: |',
    ...samples.map(([s, mib]) => `| ${s} | ${mib} |`),
    '',
  ].join('\n');
}
