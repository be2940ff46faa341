import { type ChildProcess, spawn } from 'node:child_process';
import { Agent } from 'node:http';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { distribution, round } from '../mcp-overhead/stats.js';
import { type Prepared, post } from '../oip/requests.js';

/**
 * The load generator of bench/peers: closed-loop clients, and the servers they talk to started in
 * process groups of their own and always stopped, whatever happens.
 */

/** One request, resolved when its answer has arrived and been checked. */
export type Call = () => Promise<void>;

export interface Measured {
  latency: ReturnType<typeof distribution>;
  /** Requests per second over the measured time. */
  throughput: number;
  /** The load generator's own CPU use over the measured time (100 = one core). */
  client_cpu_percent: number;
}

/** How long a measured window waits past its end for a first call to finish. */
const LONGEST_WAIT_MS = 60_000;

/**
 * Runs `concurrency` closed loops for `warmupMs`, then measures for `ms`. Each loop gets a call of
 * its own from `makeCall` (its own MCP session or keep-alive socket, unless the system shares one).
 * A failed call fails the block: a system that errors is not measured. A window in which no call
 * finished (one shorter than a call, as a smoke run's on a busy host) goes on until one does, for
 * at most `LONGEST_WAIT_MS`, so that a block that could measure reports a latency.
 */
export async function closedLoop(
  makeCall: (client: number) => Promise<Call>,
  concurrency: number,
  ms: number,
  warmupMs: number,
): Promise<Measured> {
  const calls = await Promise.all(Array.from({ length: concurrency }, (_, i) => makeCall(i)));
  const latencies: number[] = [];
  let measuring = false;
  let stop = false;
  const loops = calls.map(async (call) => {
    while (!stop) {
      const start = performance.now();
      await call();
      if (measuring) latencies.push(performance.now() - start);
    }
  });
  const failed = Promise.all(loops).then(() => undefined);
  const sleep = (t: number) => Promise.race([new Promise((r) => setTimeout(r, t)), failed]);
  let wall = 0;
  let cpu: NodeJS.CpuUsage;
  try {
    await sleep(warmupMs);
    measuring = true;
    const cpuStart = process.cpuUsage();
    const wallStart = performance.now();
    await sleep(ms);
    const longest = performance.now() + LONGEST_WAIT_MS;
    while (latencies.length === 0 && performance.now() < longest) await sleep(10);
    measuring = false;
    wall = performance.now() - wallStart;
    cpu = process.cpuUsage(cpuStart);
  } finally {
    // On a failure too: no call of this block may still be running when the next one starts.
    stop = true;
    await Promise.allSettled(loops);
  }
  await failed;
  return {
    latency: distribution(latencies),
    throughput: round((latencies.length / wall) * 1000, 1),
    client_cpu_percent: round(((cpu.user + cpu.system) / 1000 / wall) * 100, 1),
  };
}

/**
 * `all`, or ids and the group `tensorgate` (raw and every tensorgate system), comma-separated:
 * the systems a run measures, in the order `systems` lists them.
 */
export function selectSystems<Id extends string>(spec: string, systems: readonly Id[]): Id[] {
  if (spec === 'all') return [...systems];
  const ids = spec
    .split(',')
    .flatMap((id) =>
      id === 'tensorgate' ? systems.filter((s) => s === 'raw' || s.startsWith('tensorgate-')) : [id as Id],
    );
  const unknown = ids.filter((id) => !systems.includes(id));
  if (unknown.length) throw new Error(`unknown systems ${unknown.join(', ')}; known: ${systems.join(', ')}`);
  return systems.filter((s) => ids.includes(s));
}

/** A tool call on an open MCP client; an error result fails the block. */
export function toolCall(client: Client, tool: string, args: Record<string, unknown>): Call {
  return async () => {
    const result = await client.callTool({ name: tool, arguments: args });
    if (result.isError) throw new Error(`${tool}: ${JSON.stringify(result.content).slice(0, 500)}`);
  };
}

/** One MCP session per client over Streamable HTTP, as separate agents would hold. */
export async function mcpHttpCall(url: string, tool: string, args: Record<string, unknown>): Promise<Call> {
  const client = new Client({ name: 'bench', version: '0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return toolCall(client, tool, args);
}

/** A POST over a keep-alive socket of its own. */
export function httpCall(base: string, path: string, prepared: Prepared): Call {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  return async () => {
    await post(base, path, prepared, agent);
  };
}

/** Servers started and not yet stopped. */
const running = new Set<ChildProcess>();

/**
 * Servers run in process groups of their own, so a signal that stops the benchmark (a test's
 * timeout, Ctrl-C in a terminal) does not reach them: they would outlive it, holding ports and
 * cores. On the way out, however it is taken, every group still running is killed.
 */
function killRunningGroups(): void {
  for (const child of running) {
    try {
      process.kill(-(child.pid as number), 'SIGKILL');
    } catch {
      // The group is gone already.
    }
  }
  running.clear();
}

let exitHooked = false;
function hookExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  process.once('exit', killRunningGroups);
  for (const [sig, number] of [
    ['SIGTERM', 15],
    ['SIGINT', 2],
    ['SIGHUP', 1],
  ] as const)
    process.once(sig, () => process.exit(128 + number));
}

export interface Started {
  child: ChildProcess;
  /** What matched the ready pattern (its groups: a URL the server printed). */
  match: RegExpExecArray;
}

/**
 * Starts a server in a process group of its own (LitServe starts worker processes, stopped with
 * it) and resolves once its output matches `ready`.
 */
export function startProcess(
  command: string,
  args: string[],
  cwd: string,
  ready: RegExp,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Started> {
  hookExit();
  const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  running.add(child);
  return new Promise((resolvePromise, reject) => {
    let seen = '';
    // Look for the ready line, then only drain: servers log every request, and a growing string
    // here would charge the load generator for it.
    const onData = (chunk: Buffer) => {
      seen = (seen + chunk.toString()).slice(-4096);
      const match = ready.exec(seen);
      if (!match) return;
      child.stdout?.off('data', onData).resume();
      child.stderr?.off('data', onData).resume();
      resolvePromise({ child, match });
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) =>
      reject(new Error(`${command} ${args.join(' ')} exited with ${code}: ${seen.slice(-2000)}`)),
    );
  });
}

/** Stops a server and every process in its group: SIGTERM, then SIGKILL after 10 s. */
export async function stopProcess(child: ChildProcess): Promise<void> {
  running.delete(child);
  const group = -(child.pid as number);
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(group, sig);
    } catch {
      // The group is gone already.
    }
  };
  const exited = child.exitCode === null ? new Promise((r) => child.once('exit', r)) : Promise.resolve();
  signal('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
  signal('SIGKILL');
  // Idle peers poll; let the machine settle before the next system is measured.
  await new Promise((r) => setTimeout(r, 500));
}

/** Stops every server still running (on the way out after a failure). */
export async function stopAll(): Promise<void> {
  await Promise.all([...running].map(stopProcess));
}

/** Polls a GET route until it answers 200 (LitServe binds its port after its workers start). */
export async function waitHealthy(base: string, path: string, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    // Each poll is bounded: a server still starting may take a connection and not answer it.
    const ok = await fetch(`${base}${path}`, { signal: AbortSignal.timeout(2000) })
      .then((r) => r.status === 200)
      .catch(() => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`nothing answered ${base}${path}`);
}

/**
 * Starts `tensorgate serve --http 0` over a model repository in `work` (registry and audit log
 * there too) and resolves with its root URL once `ready` matches its output: the default waits for
 * the URL line, printed before models load; pass the `ready:` line's pattern to wait for them.
 */
export async function startTensorgate(
  root: string,
  models: string,
  work: string,
  ready = /at (http:\/\/[\d.]+:\d+)\/mcp/,
  options: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
  serveOptions: string[] = [],
): Promise<{ child: ChildProcess; base: string; match: RegExpMatchArray }> {
  const { child, match } = await startProcess(
    process.execPath,
    [join(root, 'bin/tensorgate.js'), '--models', models, '--registry', join(work, 'r.db')].concat([
      '--audit-log',
      join(work, 'audit.jsonl'),
      ...options,
      'serve',
      '--http',
      '0',
      ...serveOptions,
    ]),
    root,
    ready,
    env,
  );
  return { child, base: match[1] as string, match };
}

/** A TCP port free on loopback now. */
export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}
