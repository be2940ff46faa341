import type { LargeBodyResult, LargeBodyScenario } from './results.js';

/** The docs/benchmarks.md section of bench/large-body, rendered from its result files. */

function ratio(a: number, b: number): string {
  return b > 0 ? `${(a / b).toFixed(2)}x` : '';
}

export function renderLargeBody(files: unknown[]): string {
  const runs = files as LargeBodyResult[];
  const r = runs.at(-1) as LargeBodyResult;
  const m = r.machine;
  const shipped = (name: string) => r.scenarios.find((s) => s.gateway === 'shipped' && s.name === name);
  const row = (s: LargeBodyScenario) => {
    const raw = r.raw[s.model]?.p50;
    const overRaw = raw === undefined ? '' : Math.round((s.latency.p50 - raw) * 1000) / 1000;
    const same = shipped(s.name);
    return `| \`${s.name}\` | ${s.gateway} | ${s.latency.p50} | ${s.latency.p99} | ${overRaw} | ${s.calls_per_s} | ${s.cpu_ms_per_call.gateway} | ${s.cpu_ms_per_call.gateway_main ?? ''} | ${s.cpu_ms_per_call.worker} | ${same && s !== same ? ratio(s.cpu_ms_per_call.gateway, same.cpu_ms_per_call.gateway) : ''} | ${s.gc?.ms_per_call ?? ''} | ${s.gc?.major_per_1000_calls ?? ''} |`;
  };
  const batched = r.scenarios.filter((s) => s.name.startsWith('batched-') && s.cpu_ms_per_call.gateway_main);
  const ceiling = (s: LargeBodyScenario) =>
    `\`${s.name}\` ${s.cpu_ms_per_call.gateway_main} ms, at most ${Math.round(1000 / (s.cpu_ms_per_call.gateway_main as number))} calls/s`;
  return [
    '## Large bodies (bench/large-body)',
    '',
    `\`node --import tsx bench/large-body/run.ts\`: OIP v2 binary calls carrying an image-sized tensor (1x3x224x224 fp32, ${Math.round(r.config.input_bytes / 1000)} KB) to models whose forward pass is next to nothing, so that moving the body is what is measured: \`channel-mean\` (the mean of each channel: a large body in, 12 bytes out) and \`half\` (every value halved: the same size back). Two gateways: as shipped, and \`v8-default\` (\`TENSORGATE_V8_HEAP=default\`: V8's default accounting of external memory, under which the dead socket reads of large bodies bring on full collections: [architecture.md](architecture.md#large-bodies)). \`mcp-http-b64\` and \`mcp-http-path\`: \`channel-mean\` over MCP Streamable HTTP as an agent calls \`infer\`, the tensor inline as base64 or as the path of a \`.npy\` file. \`/c1\`: one client, sequential calls; \`/c${r.scenarios.find((s) => s.concurrency > 1)?.concurrency ?? 8}\`: that many clients in a closed loop, unbatched. ${r.config.calls} calls per scenario in each of ${r.config.rounds} rounds, interleaved. \`batched-binary\`, \`batched-shm\` and \`batched-mcp-path\`: \`channel-mean-batched\` (batches of up to 32, 2 ms delay) to ${r.config.wide ?? 32} clients, the tensor in the body, in a system shared-memory region (one output region per client), or as a \`.npy\` path over MCP Streamable HTTP (a session per client), as the GPU benchmark's concurrency-32 figures are taken. \`half-shm/c1\`: \`half\` to one client with its input and its output in system shared-memory regions, no tensor in the body either way.${r.config.data_threads ? ` \`channel-mean-dataplane/c1\` and \`batched-binary-dataplane\`: the same binary calls to the shipped gateway's OIP data plane (\`serve --oip-port\`, ${r.config.data_threads} threads), whose threads read the bodies and stage the tensors for the worker ([architecture.md](architecture.md#the-oip-data-plane)).` : ''} _CPU ms/call_: of the gateway process (all its threads), of its main thread alone (the JavaScript thread every request passes through), and of its worker, from /proc; _÷ shipped_: the gateway's CPU per call over the shipped gateway's in the same scenario; _GC_: the gateway's garbage collection over the scenario, from its /metrics (\`nodejs_gc_duration_seconds\`; main-thread pauses, not the helper threads' concurrent marking), and how many were full collections of the whole heap.`,
    '',
    `Machine: ${m.cores} cores (${m.cpu_model}), ${m.memory_gib} GiB, ${m.os}; Node ${m.node}, Python ${m.python}, torch ${m.torch}; commit ${m.commit}${r.config.label ? ` (${r.config.label})` : ''}; run ${r.date.slice(0, 16).replace('T', ' ')} UTC (${r.config.seconds} s). Raw forward p50: ${Object.entries(
      r.raw,
    )
      .map(([model, d]) => `\`${model}\` ${d.p50} ms`)
      .join(', ')}.`,
    '',
    '| scenario | gateway | p50 ms | p99 ms | over raw (p50) ms | calls/s | gateway CPU ms/call | main thread ms/call | worker CPU ms/call | ÷ shipped | GC ms/call | full GCs per 1000 calls |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...r.scenarios.map(row),
    '',
    ...(batched.length > 0
      ? [
          `One gateway's ceiling for image calls, from its main thread's CPU per call (on this machine's cores; the clients, the gateway's other threads and the worker share them here): ${batched.map(ceiling).join('; ')}.`,
          '',
        ]
      : []),
    ...(runs.length > 1
      ? [
          'Earlier runs (gateway CPU ms/call, its main thread where measured, calls/s): ',
          '',
          ...runs
            .slice(0, -1)
            .map(
              (e) =>
                `- ${e.date.slice(0, 16).replace('T', ' ')} (${e.config.label ?? e.machine.commit}): ${e.scenarios.map((s) => `${s.gateway} ${s.name} ${s.cpu_ms_per_call.gateway} ms${s.cpu_ms_per_call.gateway_main === undefined ? '' : ` (main ${s.cpu_ms_per_call.gateway_main})`}, ${s.calls_per_s}/s`).join('; ')}`,
            ),
          '',
        ]
      : []),
  ].join('\n');
}
