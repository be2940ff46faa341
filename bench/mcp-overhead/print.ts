import type { ProfileResults, ScenarioResult, TargetResult } from './results.js';

/** The console report of one run: the table, the targets and, after --profile, where the time went. */

const f = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '' : x.toFixed(2));

export function printReport(
  results: ScenarioResult[],
  goals: Record<string, TargetResult>,
  codec: Record<string, number>,
  profile: ProfileResults | undefined,
): void {
  const rows = [
    [
      'scenario',
      'n',
      'p50',
      'p99',
      'overhead p50',
      'paired ovh',
      'outside gw',
      'decode',
      'queue',
      'transfer',
      'compute',
      'encode',
      'srv total',
      'others %',
    ],
    ...results.map((r) => [
      r.id,
      String(r.latency.n),
      f(r.latency.p50),
      f(r.latency.p99),
      r.id === 'baseline' ? '' : f(r.overhead_p50_ms),
      f(r.paired_overhead_p50_ms),
      f(r.outside_gateway_ms),
      f(r.stages?.decode_ms),
      f(r.stages?.queue_ms),
      f(r.stages?.transfer_ms),
      f(r.stages?.compute_ms),
      f(r.stages?.encode_ms),
      f(r.stages?.total_ms),
      r.foreign_cpu_pct === undefined
        ? ''
        : `${r.foreign_cpu_pct.toFixed(1)}${r.discarded_blocks ? ` (${r.discarded_blocks} redone)` : ''}`,
    ]),
  ];
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((row) => (row[i] ?? '').length))) ?? [];
  const lines = rows.map((row) =>
    row.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join('  '),
  );
  process.stdout.write(
    `\nAll times in ms. overhead = scenario p50 - baseline p50; paired ovh = median(call - worker compute_ms);\noutside gw = median(call - server total_ms): MCP SDK, transport and client;\nothers % = CPU share used by other processes during the scenario's kept blocks.\n\n${lines.join('\n')}\n\n`,
  );
  for (const [name, g] of Object.entries(goals)) {
    const paired = g.paired === undefined ? '' : ` (paired: ${g.paired})`;
    process.stdout.write(
      `target ${name}: ${g.target}: ${g.measured}${paired} [${g.detail}] ${g.met ? 'MET' : 'NOT MET'}\n`,
    );
  }
  process.stdout.write(`codec reference (in-process, this client): ${JSON.stringify(codec)}\n`);
  if (!profile) return;
  for (const [id, p] of Object.entries(profile.server)) {
    if (!/\/(path|b64|list_models)$/.test(id)) continue;
    const client = profile.client[id];
    process.stdout.write(
      `\n${id}: server main thread busy ${p.busy_ms_per_call} ms/call, client ${client?.busy_ms_per_call ?? '?'} ms/call (profiled)\n`,
    );
    for (const [step, ms] of Object.entries(p.by_step)) process.stdout.write(`  server ${ms.toFixed(3)}  ${step}\n`);
    for (const c of p.top_self.slice(0, 6))
      process.stdout.write(`  server self ${c.ms_per_call.toFixed(3)}  ${c.frame}\n`);
    for (const c of client?.top_self.slice(0, 4) ?? []) {
      process.stdout.write(`  client self ${c.ms_per_call.toFixed(3)}  ${c.frame}\n`);
    }
  }
}
