import type { FixedCostResult, ScenarioResult } from './results.js';

/** The docs/benchmarks.md section of bench/fixed-cost, rendered from its result files. */

const STAGES = ['decode_ms', 'queue_ms', 'transfer_ms', 'compute_ms', 'encode_ms', 'total_ms'];

function cpuCells(s: ScenarioResult): string {
  return s.cpu_ms_per_call ? `${s.cpu_ms_per_call.gateway} | ${s.cpu_ms_per_call.worker}` : ' | ';
}

/** What a call costs above the architecture floor and the forward pass, in ms. */
function aboveFloor(p50: number, floor: number, raw: number): number {
  return Math.round((p50 - floor - raw) * 1000) / 1000;
}

/** What the `@placed` scenarios show, where the run had them. */
function placementText(r: FixedCostResult, p50: (name: string) => number): string[] {
  const placement = r.config.placement;
  if (!placement) return [];
  if ('none' in placement) return [`No placed scenarios in this run: ${placement.none}.`, ''];
  const stage = (name: string) => r.scenarios.find((s) => s.name === name)?.server_ms?.compute_ms;
  const cpu = (name: string) => r.scenarios.find((s) => s.name === name)?.cpu_ms_per_call?.gateway;
  const slower = p50('oip/binary@placed') > p50('oip/binary');
  return [
    `Placed (\`resources.cpus\`, [architecture.md](architecture.md#cpu-placement)): with the worker on CPU ${placement.worker} and the gateway and the client on CPU ${placement.gateway}, the worker's forward pass takes ${stage('oip/binary@placed')} ms against ${stage('oip/binary')} ms on a core it shares; the call as a whole ${p50('oip/binary@placed')} ms against ${p50('oip/binary')} over OIP and ${p50('stdio/path@placed')} against ${p50('stdio/path')} over stdio, and the gateway's CPU per OIP call ${cpu('oip/binary@placed')} ms against ${cpu('oip/binary')}.${slower ? ' What the worker gains, the gateway and the client lose: on one core they take turns.' : ''} \`raw@placed\`: the raw forward on the worker's CPU.`,
    '',
  ];
}

export function renderFixedCost(files: unknown[]): string {
  const runs = files as FixedCostResult[];
  const r = runs.at(-1) as FixedCostResult;
  const m = r.machine;
  const raw = r.scenarios.find((s) => s.name === 'raw') as ScenarioResult;
  const p50 = (name: string) => r.scenarios.find((s) => s.name === name)?.latency.p50 ?? Number.NaN;
  const staged = r.scenarios.filter((s) => s.server_ms);
  return [
    '## Fixed cost per call (bench/fixed-cost)',
    '',
    `\`node --import tsx bench/fixed-cost/run.ts\`: the demo tabular model (\`${r.config.format}\`, one row of 4 floats), where the forward pass is ${raw.latency.p50} ms and everything else is the fixed cost of a call. One client, sequential calls (concurrency 1), ${r.config.calls} calls per scenario in each of ${r.config.rounds} rounds, scenarios interleaved. The same gateways serve the model twice: as it ships (no spin on the CPU) and as \`tabular-spin\` with \`resources.spin_us: ${r.config.spin_us}\` (the worker polls its channel after answering instead of sleeping, and the gateway keeps its event loop turning while it waits for the answer: [worker-protocol.md](worker-protocol.md#spinning)). _CPU ms/call_: CPU time of the serving gateway process and of its workers over the scenario's calls, from /proc (the spinning worker's includes its polling).`,
    '',
    `Machine: ${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}, Python ${m.python}, torch ${m.torch}, MCP SDK client ${m.mcp_client} / server ${m.mcp_server}; commit ${m.commit}; run ${r.date.slice(0, 16).replace('T', ' ')} UTC (${r.config.seconds} s).`,
    '',
    '| scenario | what | p50 ms | p90 ms | p99 ms | over raw (p50) ms | gateway CPU ms/call | worker CPU ms/call |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...r.scenarios.map(
      (s) =>
        `| \`${s.name}\` | ${s.what} | ${s.latency.p50} | ${s.latency.p90} | ${s.latency.p99} | ${s.over_raw_ms ?? ''} | ${cpuCells(s)} |`,
    ),
    '',
    '### Targets',
    '',
    '| target | goal | over raw ms | allowed ms | met |',
    '| --- | --- | ---: | ---: | --- |',
    ...r.targets.map(
      (t) =>
        `| \`${t.target}\` | ${t.goal} | ${t.measured_over_raw_ms} | ${t.allowed_ms} | ${t.met ? 'yes' : '**no**'} |`,
    ),
    '',
    `The protocol floor: tensorgate's cheapest tool call (\`list_models\`) takes ${p50('stdio/list_models')} ms over stdio, the MCP TypeScript SDK alone carrying the same \`infer\` arguments to a no-op tool ${p50('sdk-echo/path')} ms, and a bare JSON-RPC echo over a pipe ${p50('echo/path')} ms.`,
    '',
    ...(r.scenarios.some((s) => s.name === 'floor/hop')
      ? [
          `The architecture floor (\`hop-server.ts\`): a bare node:http server answers the OIP request in ${p50('floor/http')} ms; with one round trip to a Python process over tensorgate's channel and framing, but no model, in ${p50('floor/hop')} ms, and ${p50('floor/hop+spin')} ms with that process spinning. Above that floor plus the raw forward, \`oip/binary\` spends ${aboveFloor(p50('oip/binary'), p50('floor/hop'), raw.latency.p50)} ms and \`oip/binary+spin\` ${aboveFloor(p50('oip/binary+spin'), p50('floor/hop+spin'), raw.latency.p50)} ms: tensorgate's own work per call, gateway and worker.`,
          '',
        ]
      : []),
    ...placementText(r, p50),
    '### Server stage timings (medians, ms)',
    '',
    "As the server reports them; _outside server_ = p50 of the call - the server's total: the transport (HTTP or MCP stdio), the SDK and the client.",
    '',
    `| scenario | ${STAGES.map((k) => k.replace('_ms', '')).join(' | ')} | outside server |`,
    `| --- | ${STAGES.map(() => '---:').join(' | ')} | ---: |`,
    ...staged.map((s) => {
      const t = s.server_ms as Record<string, number>;
      const outside = Math.round((s.latency.p50 - (t.total_ms ?? 0)) * 1000) / 1000;
      return `| \`${s.name}\` | ${STAGES.map((k) => t[k] ?? '').join(' | ')} | ${outside} |`;
    }),
    '',
    ...(runs.length > 1
      ? [
          'Earlier runs (p50 ms): ',
          '',
          ...runs
            .slice(0, -1)
            .map(
              (e) =>
                `- ${e.date.slice(0, 16).replace('T', ' ')} (${e.config.label ?? e.machine.commit}): ${e.scenarios.map((s) => `${s.name} ${s.latency.p50}`).join(', ')}`,
            ),
          '',
        ]
      : []),
  ].join('\n');
}
