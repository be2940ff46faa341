import { execFileSync } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { binaryRequest, jsonRequest, type OipTensors, type Prepared, sharedMemoryRequests } from '../oip/requests.js';
import { type Call, httpCall, mcpHttpCall, startProcess, stopProcess, toolCall, waitHealthy } from './harness.js';
import type { SystemId } from './results.js';

/**
 * The systems bench/peers measures, grouped by the server process they share: one tensorgate
 * server answers MCP and OIP v2, one LitServe server answers HTTP and MCP. Each group starts its
 * server for one model, hands out its targets (one per way of calling it), and stops it.
 */

export interface ModelCase {
  key: 'tabular' | 'image';
  /** The registered name of the batched copy (also the name KServe serves it under). */
  name: string;
  dir: string;
  /** The input as a .npy file (tensorgate's `{path}` form). */
  npy: string;
  data: Float32Array;
  tensors: OipTensors;
}

export interface Context {
  root: string;
  work: string;
  /** The Python with Debian's torch (tensorgate's workers, the raw baseline). */
  python: string;
  /** The peers' virtual environment (bench/peers/setup-peers.sh). */
  peersPython: string;
  /** Clients the largest block runs: one shared-memory output region each. */
  maxConcurrency: number;
}

export interface Target {
  system: SystemId;
  /** A call for closed-loop client number `client`. */
  makeCall(client: number): Promise<Call>;
}

export interface Session {
  targets: Target[];
  stop(): Promise<void>;
}

export interface SystemGroup {
  systems: SystemId[];
  /** Needs the peers' environment. */
  peer: boolean;
  start(model: ModelCase, ctx: Context): Promise<Session>;
}

/** The tensor as nested lists, as a JSON-list tool or endpoint takes it. */
export function nested(data: Float32Array, shape: number[]): unknown {
  if (shape.length === 1) return Array.from(data);
  const [first, ...rest] = shape as [number, ...number[]];
  const step = rest.reduce((a, b) => a * b, 1);
  return Array.from({ length: first }, (_, i) => nested(data.subarray(i * step, (i + 1) * step), rest));
}

function b64Input(m: ModelCase) {
  return {
    b64: Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength).toString('base64'),
    shape: m.tensors.shape,
    dtype: 'float32',
  };
}

/** A port nothing listens on right now, for servers that take a port number. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

function tensorgateArgs(m: ModelCase, ctx: Context): string[] {
  return [
    join(ctx.root, 'bin', 'tensorgate.js'),
    '--models',
    join(m.dir, '..'),
    '--registry',
    join(ctx.work, `registry-${m.key}.db`),
    '--allow-root',
    ctx.work,
  ];
}

/** `tensorgate serve --http`: MCP over Streamable HTTP and OIP v2 REST on one port. */
const tensorgateHttp: SystemGroup = {
  systems: [
    'tensorgate-mcp-http-path',
    'tensorgate-mcp-http-b64',
    'tensorgate-oip-json',
    'tensorgate-oip-binary',
    'tensorgate-oip-shm',
  ],
  peer: false,
  async start(m, ctx) {
    const { child: server, match } = await startProcess(
      process.execPath,
      [...tensorgateArgs(m, ctx), 'serve', '--http', '0'],
      ctx.root,
      /ready: .* at (http:\/\/[\d.]+:\d+)\/mcp/,
    );
    const base = match[1] as string;
    try {
      await waitHealthy(base, `/v2/models/${m.name}/ready`);
      const path = `/v2/models/${m.name}/infer`;
      const shm = await sharedMemoryRequests(base, `peers_${m.key}`, m.tensors, m.data, ctx.maxConcurrency);
      const input = m.tensors.input;
      const mcp = (form: unknown) => () =>
        mcpHttpCall(`${base}/mcp`, 'infer', { model: m.name, inputs: { [input]: form } });
      const oip = (prepared: Prepared) => async () => httpCall(base, path, prepared);
      return {
        targets: [
          { system: 'tensorgate-mcp-http-path', makeCall: mcp({ path: m.npy }) },
          { system: 'tensorgate-mcp-http-b64', makeCall: mcp(b64Input(m)) },
          { system: 'tensorgate-oip-json', makeCall: oip(jsonRequest(m.tensors, m.data)) },
          { system: 'tensorgate-oip-binary', makeCall: oip(binaryRequest(m.tensors, m.data)) },
          {
            system: 'tensorgate-oip-shm',
            makeCall: async (i) => httpCall(base, path, shm.requests[i] as Prepared),
          },
        ],
        stop: async () => {
          await stopProcess(server);
          shm.cleanup();
        },
      };
    } catch (err) {
      await stopProcess(server);
      throw err;
    }
  },
};

/**
 * `tensorgate serve --stdio`, started by the MCP client as an agent host starts it: one server,
 * one client, every closed loop's calls in flight on the same stdio pipe.
 */
const tensorgateStdio: SystemGroup = {
  systems: ['tensorgate-mcp-stdio-path', 'tensorgate-mcp-stdio-b64'],
  peer: false,
  async start(m, ctx) {
    const client = new Client({ name: 'bench-peers', version: '0' });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [...tensorgateArgs(m, ctx), 'serve', '--stdio'],
        cwd: ctx.root,
        env: process.env as Record<string, string>,
        stderr: 'ignore',
      }),
    );
    const args = (form: unknown) => ({ model: m.name, inputs: { [m.tensors.input]: form } });
    // The first call waits for the model to load: let that happen before any block starts.
    await toolCall(client, 'infer', args({ path: m.npy }))();
    return {
      targets: [
        { system: 'tensorgate-mcp-stdio-path', makeCall: async () => toolCall(client, 'infer', args({ path: m.npy })) },
        { system: 'tensorgate-mcp-stdio-b64', makeCall: async () => toolCall(client, 'infer', args(b64Input(m))) },
      ],
      stop: () => client.close(),
    };
  },
};

/**
 * A Python peer server on a free port: `script --model-dir DIR --port N`, started once its output
 * matches `ready` and, when given, its `health` route answers 200.
 */
async function startPeer(script: string, m: ModelCase, ctx: Context, ready: RegExp, health?: string) {
  const port = await freePort();
  const { child } = await startProcess(
    ctx.peersPython,
    [join(ctx.root, script), '--model-dir', m.dir, '--port', String(port)],
    ctx.root,
    ready,
  );
  const base = `http://127.0.0.1:${port}`;
  try {
    if (health) await waitHealthy(base, health);
  } catch (err) {
    await stopProcess(child);
    throw err;
  }
  return { base, child };
}

/** The KServe model server (bench/oip/kserve_server.py): OIP v2, the same binary request as tensorgate's. */
const kserve: SystemGroup = {
  systems: ['kserve-oip-binary'],
  peer: true,
  async start(m, ctx) {
    const { base, child } = await startPeer('bench/oip/kserve_server.py', m, ctx, /./, `/v2/models/${m.name}/ready`);
    const request = binaryRequest(m.tensors, m.data);
    return {
      targets: [
        { system: 'kserve-oip-binary', makeCall: async () => httpCall(base, `/v2/models/${m.name}/infer`, request) },
      ],
      stop: () => stopProcess(child),
    };
  },
};

/** The user report's setup (bench/peers/mcp_list_server.py): FastMCP, the tensor as a JSON list. */
const fastmcpList: SystemGroup = {
  systems: ['fastmcp-list'],
  peer: true,
  async start(m, ctx) {
    const { base, child } = await startPeer('bench/peers/mcp_list_server.py', m, ctx, /Uvicorn running/);
    const inputs = nested(m.data, m.tensors.shape);
    return {
      targets: [{ system: 'fastmcp-list', makeCall: () => mcpHttpCall(`${base}/mcp`, 'predict', { inputs }) }],
      stop: () => stopProcess(child),
    };
  },
};

/** LitServe with its batching (bench/peers/litserve_server.py): its HTTP endpoint and its MCP endpoint. */
const litserve: SystemGroup = {
  systems: ['litserve-http', 'litserve-mcp'],
  peer: true,
  async start(m, ctx) {
    const { base, child } = await startPeer(
      'bench/peers/litserve_server.py',
      m,
      ctx,
      /Uvicorn running|Application startup complete/,
      '/health',
    );
    const inputs = nested(m.data, m.tensors.shape);
    const body: Prepared = {
      body: Buffer.from(JSON.stringify({ inputs })),
      headers: { 'content-type': 'application/json' },
    };
    return {
      targets: [
        { system: 'litserve-http', makeCall: async () => httpCall(base, '/predict', body) },
        { system: 'litserve-mcp', makeCall: () => mcpHttpCall(`${base}/mcp/`, 'predict', { request: { inputs } }) },
      ],
      stop: () => stopProcess(child),
    };
  },
};

/** Ray Serve with `@serve.batch` (bench/peers/ray_server.py) behind its HTTP proxy. */
const rayServe: SystemGroup = {
  systems: ['ray-serve-http'],
  peer: true,
  async start(m, ctx) {
    const ray = join(ctx.peersPython, '..', 'ray');
    // A Ray instance left over by an earlier failed run would be joined instead of started.
    execFileSync(ray, ['stop', '--force'], { stdio: 'ignore' });
    const { base, child } = await startPeer('bench/peers/ray_server.py', m, ctx, /^ready$/m);
    const body: Prepared = {
      body: Buffer.from(JSON.stringify({ inputs: nested(m.data, m.tensors.shape) })),
      headers: { 'content-type': 'application/json' },
    };
    return {
      targets: [{ system: 'ray-serve-http', makeCall: async () => httpCall(base, '/predict', body) }],
      stop: async () => {
        // Ray's actors live in process groups of their own; `ray stop` reaches them all.
        execFileSync(ray, ['stop', '--force'], { stdio: 'ignore' });
        await stopProcess(child);
      },
    };
  },
};

/** In the order they run. */
export const GROUPS: SystemGroup[] = [tensorgateHttp, tensorgateStdio, kserve, fastmcpList, litserve, rayServe];
