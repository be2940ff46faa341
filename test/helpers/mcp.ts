import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { ensureTestModels, ROOT } from './models.js';

/**
 * Starts the real CLI (`tensorgate serve`) over the models built for tests and connects the
 * official MCP client to it over a real transport. Nothing of tensorgate is mocked.
 */

/**
 * `http` is Streamable HTTP as the client speaks it by default (the 2025 era: a session, one
 * server per session); `http-2026` pins the 2026-07-28 revision, served statelessly with one
 * server per request.
 */
export type TransportKind = 'stdio' | 'http' | 'http-2026';

export interface Connected {
  client: Client;
  workDir: string;
  url?: string;
  /** What the server wrote on stderr so far (HTTP only). */
  serverLog: () => string;
  close: () => Promise<void>;
}

const CLI = join(ROOT, 'bin', 'tensorgate.js');

export async function connect(
  kind: TransportKind,
  readyTimeoutMs = 120_000,
  serveArgs: string[] = [],
  /** Another model repository than the test models (one a test assembled). */
  modelsDir?: string,
  /** Options of the program itself, given before `serve` (another --allow-root). */
  globalArgs: string[] = [],
): Promise<Connected> {
  const models = modelsDir ?? ensureTestModels();
  const workDir = mkdtempSync(join(tmpdir(), 'tensorgate-test-'));
  const common = [
    '--models',
    models,
    '--registry',
    join(workDir, 'registry.db'),
    '--allow-root',
    workDir,
    ...globalArgs,
  ];
  const client = new Client(
    { name: 'tensorgate-tests', version: '0.0.0' },
    kind === 'http-2026' ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : {},
  );
  let close: () => Promise<void>;
  let url: string | undefined;
  let log = '';

  if (kind === 'stdio') {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, ...common, 'serve', '--stdio'],
      stderr: 'ignore',
      cwd: ROOT,
    });
    await client.connect(transport);
    close = () => client.close();
  } else {
    const child = spawn(process.execPath, [CLI, ...common, 'serve', '--http', '0', ...serveArgs], {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      log += chunk;
    });
    url = await waitForUrl(child);
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    close = async () => {
      await client.close();
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    };
  }
  await waitForModels(client, readyTimeoutMs);
  return { client, workDir, url, close, serverLog: () => log };
}

/**
 * One real HTTP server for a test file: started before its tests and stopped after them. Read
 * `server` and `base` (the root URL, without /mcp) inside tests, once `before` has run.
 */
export function httpServerForFile(serveArgs: string[] = []): { readonly server: Connected; readonly base: string } {
  let server: Connected | undefined;
  before(async () => {
    server = await connect('http', undefined, serveArgs);
  });
  after(async () => {
    await server?.close();
  });
  return {
    get server(): Connected {
      if (!server) throw new Error('the server starts in before(); use it inside tests');
      return server;
    },
    get base(): string {
      return (this.server.url as string).replace(/\/mcp$/, '');
    },
  };
}

/** Resolves with the MCP URL that `serve --http` prints on stderr once it listens. */
export function waitForUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = '';
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      seen += chunk;
      const match = /(https?:\/\/[\d.]+:\d+\/mcp)/.exec(seen);
      if (match) resolve(match[1] as string);
    });
    child.once('exit', (code) => reject(new Error(`serve exited with ${code}: ${seen}`)));
  });
}

/** Polls list_models until no version is still loading. */
async function waitForModels(client: Client, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const result = await client.callTool({ name: 'list_models', arguments: {} });
    const models = (result.structuredContent as { models: { versions: { state: string }[] }[] }).models;
    if (
      models.length > 0 &&
      models.every((m) => m.versions.every((v) => v.state !== 'loading' && v.state !== 'unloaded'))
    ) {
      return;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error('models did not become ready in time');
}
