import type { ProfileSummary } from './cpu-profile.js';
import type { McpOverheadResult, ScenarioResult } from './results.js';

/** The docs/benchmarks.md section of bench/mcp-overhead, rendered from its result files. */

const WHAT: Record<string, string> = {
  baseline: 'raw forward in one Python process, back to back (the baseline)',
  'baseline/gaps': 'same forward with {gap} ms idle before each call, as between served requests',
  'stdio/path': '`infer` over MCP stdio, input `{path}` to a .npy file',
  'stdio/b64': '`infer` over MCP stdio, input `{b64, shape, dtype}`',
  'stdio/array': '`infer` over MCP stdio, input as a nested JSON array',
  'stdio/list_models': '`list_models` over MCP stdio (a no-op tool call)',
  'stdio/ping': 'MCP `ping` over stdio (no tool at all)',
  'http/path': '`infer` over Streamable HTTP, input `{path}`',
  'http/b64': '`infer` over Streamable HTTP, input `{b64, shape, dtype}`',
  'http/array': '`infer` over Streamable HTTP, nested JSON array',
  'http/list_models': '`list_models` over Streamable HTTP',
  'http/ping': 'MCP `ping` over Streamable HTTP',
  'sdk-echo/path': 'MCP SDK alone (McpServer + stdio, no-op `infer` tool), `{path}` arguments',
  'sdk-echo/b64': 'MCP SDK alone, carrying the same b64 arguments',
  'echo/b64': 'bare newline-delimited JSON-RPC echo over stdio, no SDK: JSON.parse only (the floor)',
  'echo/b64+decode': 'same echo, also decoding the base64 into bytes',
};

const ms = (x: number | undefined, digits = 2) => (x === undefined || Number.isNaN(x) ? '' : x.toFixed(digits));
const row = (cells: (string | number)[]) => `| ${cells.join(' | ')} |`;
/** A table head; the first `text` columns are left-aligned, the rest (numbers) right-aligned. */
const header = (cells: string[], text = 1) => `${row(cells)}\n${row(cells.map((_, i) => (i < text ? '---' : '---:')))}`;

function machineLine(r: McpOverheadResult): string {
  const m = r.machine;
  return (
    `${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}, Python ${m.python}, ` +
    `torch ${m.torch}, MCP SDK client ${m.mcp_client} / server ${m.mcp_server}; commit ${m.commit}; ` +
    `run ${r.date.slice(0, 16).replace('T', ' ')} UTC`
  );
}

function latencyTable(r: McpOverheadResult): string {
  const lines = [
    header(['scenario', 'what', 'n', 'p50 ms', 'p99 ms', 'overhead p50 ms', 'paired ms', 'other procs %'], 2),
  ];
  for (const s of r.scenarios) {
    const what = (WHAT[s.id] ?? s.form).replace('{gap}', String(r.config.gap_ms));
    const other = s.foreign_cpu_pct === undefined ? '' : `${ms(s.foreign_cpu_pct, 1)}`;
    const redone = s.discarded_blocks ? ` (${s.discarded_blocks} redone)` : '';
    lines.push(
      row([
        `\`${s.id}\``,
        what,
        s.latency.n,
        ms(s.latency.p50),
        ms(s.latency.p99),
        s.id === 'baseline' ? '' : ms(s.overhead_p50_ms),
        ms(s.paired_overhead_p50_ms),
        other + redone,
      ]),
    );
  }
  return lines.join('\n');
}

function targetsTable(r: McpOverheadResult): string {
  const lines = [header(['target', 'goal', 'how it is computed', 'measured', 'paired', 'met'], 3)];
  for (const [name, t] of Object.entries(r.targets)) {
    lines.push(row([`\`${name}\``, t.target, t.detail, ms(t.measured), ms(t.paired), t.met ? 'yes' : '**no**']));
  }
  return lines.join('\n');
}

function stagesTable(r: McpOverheadResult): string {
  const base = r.scenarios.find((s) => s.id === 'baseline')?.latency.p50 ?? Number.NaN;
  const lines = [
    header([
      'scenario',
      'decode',
      'queue',
      'transfer',
      'compute',
      'encode',
      'server total',
      'outside server',
      'compute - baseline',
    ]),
  ];
  for (const s of r.scenarios.filter((x) => x.stages)) {
    const st = s.stages ?? {};
    lines.push(
      row([
        `\`${s.id}\``,
        ms(st.decode_ms),
        ms(st.queue_ms),
        ms(st.transfer_ms),
        ms(st.compute_ms),
        ms(st.encode_ms),
        ms(st.total_ms),
        ms(s.outside_gateway_ms),
        ms((st.compute_ms ?? Number.NaN) - base),
      ]),
    );
  }
  return lines.join('\n');
}

/** The overhead of the path and b64 scenarios split into the parts the run measured. */
function decompositionTable(r: McpOverheadResult): string {
  const ids = ['stdio/path', 'stdio/b64', 'http/path', 'http/b64'];
  const cols = ids.map((id) => r.scenarios.find((s) => s.id === id)).filter((s): s is ScenarioResult => !!s);
  const base = r.scenarios.find((s) => s.id === 'baseline')?.latency.p50 ?? Number.NaN;
  const sdk = (s: ScenarioResult) =>
    s.transport === 'stdio' ? r.scenarios.find((x) => x.id === `sdk-echo/${s.form}`)?.latency.p50 : undefined;
  const parts: [string, (s: ScenarioResult) => number | undefined][] = [
    ['forward slower than the baseline (compute - baseline p50)', (s) => (s.stages?.compute_ms ?? Number.NaN) - base],
    ['decode (path read / base64 decode, checks)', (s) => s.stages?.decode_ms],
    ['queue', (s) => s.stages?.queue_ms],
    ['transfer (shared memory + worker control channel)', (s) => s.stages?.transfer_ms],
    ['encode (summary, tensor store)', (s) => s.stages?.encode_ms],
    ['outside the server stages: MCP transport, SDK, client', (s) => s.outside_gateway_ms],
    ['&nbsp;&nbsp;of which the MCP SDK alone carries such a call in (sdk-echo)', sdk],
  ];
  const lines = [header(['part (medians, ms)', ...cols.map((s) => `\`${s.id}\``)])];
  for (const [label, get] of parts) lines.push(row([label, ...cols.map((s) => ms(get(s)))]));
  const sum = (s: ScenarioResult) => parts.slice(0, -1).reduce((a, [, get]) => a + (get(s) ?? 0), 0);
  lines.push(row(['sum of the parts', ...cols.map((s) => ms(sum(s)))]));
  lines.push(
    row(['**overhead p50** (medians do not add up exactly)', ...cols.map((s) => `**${ms(s.overhead_p50_ms)}**`)]),
  );
  return lines.join('\n');
}

function referenceLines(r: McpOverheadResult): string {
  const get = (id: string) => r.scenarios.find((s) => s.id === id);
  const out: string[] = [];
  const gaps = get('baseline/gaps');
  const base = get('baseline');
  if (gaps && base) {
    const idle = gaps.latency.p50 - base.latency.p50;
    out.push(
      `- The same forward with ${r.config.gap_ms} ms idle before each call takes ${ms(gaps.latency.p50)} ms p50 ` +
        `(${idle >= 0 ? '+' : ''}${ms(idle)} ms against back to back): ` +
        (idle > 0.2
          ? 'that much of a served call\'s "compute - baseline" is the model running after idle time ' +
            '(threads asleep, caches cold), not MCP.'
          : 'idle time between calls does not slow the forward measurably in this run.'),
    );
  }
  const sdkB64 = get('sdk-echo/b64');
  const sdkPath = get('sdk-echo/path');
  const echo = get('echo/b64');
  if (sdkB64 && sdkPath && echo) {
    out.push(
      `- The MCP SDK alone (no tensorgate, no model) answers a small call in ${ms(sdkPath.latency.p50)} ms and one ` +
        `carrying the b64 payload in ${ms(sdkB64.latency.p50)} ms; the bare JSON-RPC echo of that payload takes ` +
        `${ms(echo.latency.p50)} ms.`,
    );
  }
  const c = r.codec;
  out.push(
    `- In-process, this client: JSON.stringify of the b64 request ${ms(c.b64_stringify_ms)} ms, JSON.parse ` +
      `${ms(c.b64_parse_ms)} ms, base64 decode ${ms(c.b64_decode_ms)} ms; the JSON-array request ` +
      `(${c.array_request_chars} chars) ${ms(c.array_stringify_ms)} ms to stringify and ${ms(c.array_parse_ms)} ms to parse.`,
  );
  return out.join('\n');
}

function profileSection(p: McpOverheadResult): string {
  const profile = p.profile;
  if (!profile) return '';
  const ids = Object.keys(profile.server).filter((id) => /\/(path|b64)$/.test(id));
  const parts = [
    '### Where the time goes (CPU profile)',
    '',
    `From the newest \`--profile\` run (${p.date.slice(0, 16).replace('T', ' ')} UTC, commit ${p.machine.commit}): ` +
      'the servers ran under `node --cpu-prof` (100 µs sampling asked) and the client profiled itself; only ' +
      "samples taken during each scenario's calls count, each as one median sampling interval, which estimates " +
      'main-thread CPU ms per call. The profilers slow everything down, so use the figures for proportions. Each ' +
      'sample goes to the innermost pipeline step on its stack (node streams/http only when no other step is).',
    '',
  ];
  for (const id of ids) {
    const server = profile.server[id] as ProfileSummary;
    const client = profile.client[id];
    parts.push(
      `**\`${id}\`**: server busy ${ms(server.busy_ms_per_call)} ms/call` +
        (client ? `, client busy ${ms(client.busy_ms_per_call)} ms/call` : ''),
      '',
      header(['server step', 'ms/call']),
      ...Object.entries(server.by_step).map(([step, v]) => row([step, ms(v, 3)])),
      '',
      header(['top server frames (self)', 'ms/call']),
      ...server.top_self.slice(0, 8).map((f) => row([`\`${f.frame}\``, ms(f.ms_per_call, 3)])),
      '',
    );
    if (client) {
      parts.push(
        header(['top client frames (self)', 'ms/call']),
        ...client.top_self.slice(0, 5).map((f) => row([`\`${f.frame}\``, ms(f.ms_per_call, 3)])),
        '',
      );
    }
  }
  return parts.join('\n');
}

function historyTable(runs: McpOverheadResult[]): string {
  const pick = (r: McpOverheadResult, id: string) => r.scenarios.find((s) => s.id === id);
  const lines = [
    header(
      [
        'date (UTC)',
        'commit',
        'cores',
        'baseline p50',
        'stdio/path ovh',
        'http/path ovh',
        'stdio/b64 ovh',
        'echo p50',
        'stdio b64/echo',
        'stdio/array ovh',
      ],
      2,
    ),
  ];
  for (const r of runs) {
    lines.push(
      row([
        r.date.slice(0, 16).replace('T', ' '),
        r.machine.commit,
        r.machine.cores,
        ms(pick(r, 'baseline')?.latency.p50),
        ms(pick(r, 'stdio/path')?.overhead_p50_ms),
        ms(pick(r, 'http/path')?.overhead_p50_ms),
        ms(pick(r, 'stdio/b64')?.overhead_p50_ms),
        ms(pick(r, 'echo/b64')?.latency.p50),
        ms(r.targets['stdio/b64']?.measured),
        ms(pick(r, 'stdio/array')?.overhead_p50_ms),
      ]),
    );
  }
  return lines.join('\n');
}

function isComplete(r: McpOverheadResult): boolean {
  return ['baseline', 'stdio/path', 'stdio/b64', 'http/path', 'http/b64', 'echo/b64'].every((id) =>
    r.scenarios.some((s) => s.id === id),
  );
}

export function renderMcpOverhead(files: unknown[]): string {
  const runs = (files as McpOverheadResult[]).filter((r) => Array.isArray(r.scenarios) && r.targets && r.config);
  const plain = runs.filter((r) => !r.profiled && isComplete(r));
  const latest = plain.at(-1);
  const profiled = runs.filter((r) => r.profiled).at(-1);
  const parts = [
    '## MCP overhead (`bench/mcp-overhead`)',
    '',
    'What an MCP `infer` call costs on top of the model: the image model, one client, sequential calls, every ' +
      'scenario in the same run, interleaved in rounds so that drift of the machine hits all alike. ' +
      '_overhead_ = scenario p50 - baseline p50. _paired_ = median over calls of (call time - the forward time ' +
      'the worker measured for that call): the same overhead without forward-pass jitter, but blind to a forward ' +
      'that runs slower when served. _other procs %_ = share of the CPUs that processes outside the benchmark ' +
      'used meanwhile; blocks where it passed the limit were measured again.',
    '',
  ];
  if (!latest) {
    parts.push('_No complete plain run in bench/results yet._', '');
    return [...parts, profiled ? profileSection(profiled) : ''].join('\n');
  }
  const cfg = latest.config;
  const input = cfg.input;
  parts.push(
    `Machine: ${machineLine(latest)}.`,
    '',
    `Setup: \`${cfg.model}\` (TorchScript, ${cfg.threads} threads), input ${input.dtype}[${input.shape.join(', ')}] ` +
      `= ${input.bytes} bytes, ${input.b64_chars} base64 characters, ${input.array_json_chars} characters as a JSON ` +
      `array; ${cfg.iterations} calls per scenario (${cfg.array_iterations} for arrays) in ${cfg.rounds} rounds ` +
      `after ${cfg.warmup} warm-up calls; the run took ${cfg.wall_s} s.`,
    '',
    '### Latency',
    '',
    latencyTable(latest),
    '',
    '### Targets',
    '',
    targetsTable(latest),
    '',
    '### Server stage timings (medians, ms)',
    '',
    'As the server reports them in `structuredContent.timings`; _outside server_ = median of (call time - ' +
      'server total): MCP transport, SDK and client; _compute - baseline_ = how much slower the forward ran ' +
      'inside the worker than back to back in the baseline process.',
    '',
    stagesTable(latest),
    '',
    '### Overhead by part',
    '',
    decompositionTable(latest),
    '',
    referenceLines(latest),
    '',
  );
  if (profiled) parts.push(profileSection(profiled));
  if (plain.length > 1) parts.push('### All runs in bench/results (oldest first)', '', historyTable(plain), '');
  return parts.join('\n');
}
