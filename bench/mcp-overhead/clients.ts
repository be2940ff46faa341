import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface, type Interface } from 'node:readline';
import { Client, StreamableHTTPClientTransport, type Transport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import type { StageTimings } from '../../src/gateway.js';

/**
 * The processes a benchmark talks to: the tensorgate server over MCP (stdio or Streamable HTTP,
 * the official client, nothing mocked), the bare JSON-RPC echo child, and the Python baseline.
 * Each one answers `call()` with the client-side time and, for MCP, where inside the call it went.
 */

/** One timed call. `client` splits the wall time at the transport boundary (see wrapTransport). */
export interface Sample {
  ms: number;
  timings?: StageTimings;
  client?: { before_send_ms: number; round_trip_ms: number; after_receive_ms: number };
}

const HERE = new URL('.', import.meta.url).pathname;

export interface ServerOptions {
  root: string;
  models: string;
  workDir: string;
  /** When set, the server runs with --cpu-prof and writes its profile here on exit. */
  cpuProfDir?: string;
}

/** The MCP client plus per-call transport timestamps. */
export class McpConnection {
  private sendAt = 0;
  private receiveAt = 0;
  stderr = '';

  private constructor(
    readonly kind: 'stdio' | 'http',
    readonly client: Client,
    private readonly stop: () => Promise<void>,
    /** The server process (stdio: the child the transport started). */
    readonly pid?: number,
  ) {}

  static async open(kind: 'stdio' | 'http', opts: ServerOptions): Promise<McpConnection> {
    const cli = join(opts.root, 'bin', 'tensorgate.js');
    const nodeFlags = opts.cpuProfDir
      ? ['--cpu-prof', `--cpu-prof-dir=${opts.cpuProfDir}`, '--cpu-prof-interval', '100']
      : [];
    const common = [
      '--models',
      opts.models,
      '--registry',
      join(opts.workDir, `registry-${kind}.db`),
      '--allow-root',
      opts.workDir,
    ];
    const client = new Client({ name: 'tensorgate-bench', version: '0.0.0' });
    if (kind === 'stdio') {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [...nodeFlags, cli, ...common, 'serve', '--stdio'],
        stderr: 'pipe',
        cwd: opts.root,
        // The SDK passes only a few variables by default; give both servers the same environment.
        env: process.env as Record<string, string>,
      });
      let conn: McpConnection | undefined;
      transport.stderr?.on('data', (chunk: Buffer) => {
        if (conn) conn.stderr = (conn.stderr + chunk.toString()).slice(-8000);
      });
      await client.connect(transport);
      const pid = transport.pid;
      conn = new McpConnection(
        kind,
        client,
        async () => {
          // Let the server exit on its own (stdin EOF -> shutdown -> exit), so --cpu-prof gets written.
          const proc = pid ? waitForExit(pid) : Promise.resolve();
          await client.close();
          await proc;
        },
        pid ?? undefined,
      );
      conn.wrap(transport);
      return conn;
    }
    const child = spawn(process.execPath, [...nodeFlags, cli, ...common, 'serve', '--http', '0'], {
      cwd: opts.root,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const url = await waitForUrl(child);
    const transport = new StreamableHTTPClientTransport(new URL(url));
    await client.connect(transport);
    const conn = new McpConnection(
      kind,
      client,
      async () => {
        await client.close();
        child.kill('SIGTERM');
        if (child.exitCode === null) await once(child, 'exit');
      },
      child.pid,
    );
    child.stderr?.on('data', (chunk: Buffer) => {
      conn.stderr = (conn.stderr + chunk.toString()).slice(-8000);
    });
    conn.wrap(transport);
    return conn;
  }

  /**
   * An MCP client over Streamable HTTP to a server that is already running (not stopped by
   * close()); `protocolVersion` pins a revision (2026-07-28: no session, a server per request).
   */
  static async attach(url: string, protocolVersion?: string): Promise<McpConnection> {
    const client = new Client(
      { name: 'tensorgate-bench', version: '0.0.0' },
      protocolVersion ? { versionNegotiation: { mode: { pin: protocolVersion } } } : {},
    );
    const transport = new StreamableHTTPClientTransport(new URL(url));
    await client.connect(transport);
    const conn = new McpConnection('http', client, () => client.close());
    conn.wrap(transport);
    return conn;
  }

  /** The SDK's own floor: sdk-echo-server.mjs (McpServer + StdioServerTransport, a no-op `infer`). */
  static async openSdkEcho(): Promise<McpConnection> {
    const client = new Client({ name: 'tensorgate-bench', version: '0.0.0' });
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [join(HERE, 'sdk-echo-server.mjs')],
      stderr: 'inherit',
    });
    await client.connect(transport);
    const conn = new McpConnection('stdio', client, () => client.close());
    conn.wrap(transport);
    return conn;
  }

  /** Records when the SDK hands a message to the transport and when the transport delivers one. */
  private wrap(transport: Transport): void {
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
      this.sendAt = performance.now();
      return send(message, options);
    };
    const onmessage = transport.onmessage;
    if (!onmessage) throw new Error('client.connect() did not install onmessage');
    transport.onmessage = (message, extra) => {
      this.receiveAt = performance.now();
      onmessage(message, extra);
    };
  }

  /** Polls list_models until every version has finished loading and `model` has a ready one. */
  async waitReady(model = 'image-classifier', timeoutMs = 180_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const result = await this.client.callTool({ name: 'list_models', arguments: {} });
      const models = (result.structuredContent as { models: { name: string; versions: { state: string }[] }[] }).models;
      const wanted = models.find((m) => m.name === model);
      if (wanted && models.every((m) => m.versions.every((v) => v.state !== 'loading' && v.state !== 'unloaded'))) {
        if (!wanted.versions.some((v) => v.state === 'ready')) throw new Error(`${model} failed to load`);
        return;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`models did not become ready in time; server stderr:\n${this.stderr}`);
  }

  async callTool(name: string, args: Record<string, unknown>): Promise<Sample> {
    const t0 = performance.now();
    const result = await this.client.callTool({ name, arguments: args });
    const t1 = performance.now();
    if (result.isError) {
      const text = (result.content as { type: string; text?: string }[]).map((c) => c.text ?? '').join(' ');
      throw new Error(`${name} failed over ${this.kind}: ${text}`);
    }
    const structured = result.structuredContent as { timings?: StageTimings } | undefined;
    return {
      ms: t1 - t0,
      ...(structured?.timings ? { timings: structured.timings } : {}),
      client: {
        before_send_ms: this.sendAt - t0,
        round_trip_ms: this.receiveAt - this.sendAt,
        after_receive_ms: t1 - this.receiveAt,
      },
    };
  }

  async ping(): Promise<Sample> {
    const t0 = performance.now();
    await this.client.ping();
    return { ms: performance.now() - t0 };
  }

  close(): Promise<void> {
    return this.stop();
  }
}

/** The bare newline-delimited JSON-RPC echo child (echo-server.mjs): no SDK, no model. */
export class EchoConnection {
  private readonly child: ChildProcess;
  private readonly lines: Interface;
  private readonly waiting: ((line: string) => void)[] = [];
  private nextId = 1;

  constructor(decode = false) {
    this.child = spawn(process.execPath, [join(HERE, 'echo-server.mjs'), ...(decode ? ['--decode'] : [])], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.lines = createInterface({ input: this.child.stdout as NodeJS.ReadableStream });
    this.lines.on('line', (line) => this.waiting.shift()?.(line));
  }

  /** Sends a tools/call-shaped request with these arguments, the way an SDK client would frame it. */
  async call(args: Record<string, unknown>): Promise<Sample> {
    const t0 = performance.now();
    const id = this.nextId++;
    const reply = new Promise<string>((resolve) => this.waiting.push(resolve));
    const message = { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'infer', arguments: args } };
    this.child.stdin?.write(`${JSON.stringify(message)}\n`);
    const parsed = JSON.parse(await reply) as { id: number };
    const ms = performance.now() - t0;
    if (parsed.id !== id) throw new Error(`echo answered id ${parsed.id}, expected ${id}`);
    return { ms };
  }

  async close(): Promise<void> {
    this.child.stdin?.end();
    if (this.child.exitCode === null) await once(this.child, 'exit');
  }
}

/** What baseline.py reports once its model is loaded and warm. */
export interface BaselineInfo {
  version: string;
  threads: number;
  file: string;
  torch: string;
  python: string;
  shape: number[];
  dtype: string;
  /** Whether `--direct` calls an exported program's forward as the worker does. */
  direct: boolean;
}

/** The Python baseline (baseline.py --serve), loaded and warmed once, run in blocks on demand. */
export class BaselineProcess {
  private readonly child: ChildProcess;
  private readonly lines: Interface;
  private readonly waiting: ((line: string) => void)[] = [];
  readonly ready: Promise<BaselineInfo>;

  /** `flags`: more of baseline.py's options (`--direct`). */
  constructor(python: string, modelDir: string, input: string, warmup: number, flags: string[] = []) {
    this.child = spawn(
      python,
      [
        join(HERE, 'baseline.py'),
        '--serve',
        '--model-dir',
        modelDir,
        '--input',
        input,
        '--warmup',
        String(warmup),
        ...flags,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    this.lines = createInterface({ input: this.child.stdout as NodeJS.ReadableStream });
    this.lines.on('line', (line) => this.waiting.shift()?.(line));
    const exited = once(this.child, 'exit').then(([code]) => {
      throw new Error(`baseline.py exited with ${code} before it was ready`);
    });
    this.ready = Promise.race([this.nextLine().then((l) => (JSON.parse(l) as { ready: BaselineInfo }).ready), exited]);
    exited.catch(() => {});
  }

  private nextLine(): Promise<string> {
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  async run(n: number, gapMs = 0): Promise<Sample[]> {
    const line = this.nextLine();
    this.child.stdin?.write(`${n} ${gapMs}\n`);
    return (JSON.parse(await line) as { ms: number[] }).ms.map((ms) => ({ ms }));
  }

  async close(): Promise<void> {
    this.child.stdin?.end();
    if (this.child.exitCode === null) await once(this.child, 'exit');
  }
}

function waitForUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = '';
    child.stderr?.setEncoding('utf8');
    const onData = (chunk: string) => {
      seen += chunk;
      const match = /(http:\/\/[\d.]+:\d+\/mcp)/.exec(seen);
      if (match) {
        child.stderr?.off('data', onData);
        resolve(match[1] as string);
      }
    };
    child.stderr?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`serve --http exited with ${code}: ${seen}`)));
  });
}

/** Resolves once a process (not our child object) is gone, polling kill(pid, 0). */
async function waitForExit(pid: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
