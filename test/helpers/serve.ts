import { type ChildProcess, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitForUrl } from './mcp.js';
import { ensureTestModels, ROOT } from './models.js';

/**
 * The real CLI (`tensorgate serve --http 0`, run from source) over a repository holding one test
 * model, with its stderr kept: for tests of what the server logs and exports.
 */

export type LogRecord = Record<string, unknown> & { level: string; msg: string; time: number };

export interface Served {
  child: ChildProcess;
  /** The server's folder: models/, r.db, audit.jsonl. */
  work: string;
  /** The MCP endpoint. */
  url: string;
  /** http://HOST:PORT, for /v2 and /metrics. */
  base: string;
  /** Everything written on stderr so far. */
  stderr: () => string;
  /** The stderr lines parsed as JSON; throws on a line that is not. */
  records: () => LogRecord[];
  /** Polls the records until one matches. */
  waitForRecord: (match: (r: LogRecord) => boolean, what: string, timeoutMs?: number) => Promise<LogRecord>;
  /** SIGTERM; resolves with the exit code. */
  stop: () => Promise<number | null>;
}

export async function serveOne(
  model: string | string[],
  options: {
    globalArgs?: string[];
    serveArgs?: string[];
    env?: NodeJS.ProcessEnv;
    /** Workflow folders of test/fixtures/workflows to put in the repository too. */
    workflows?: string[];
    /** Changes each copied model's config.json before the server starts. */
    editConfig?: (config: Record<string, unknown>) => void;
    /** Runs on the models folder once the models are copied, before the server starts. */
    prepare?: (models: string) => void | Promise<void>;
    /** The main port (default 0: any free one). */
    http?: number;
  } = {},
): Promise<Served> {
  const work = mkdtempSync(join(tmpdir(), 'tg-serve-'));
  for (const name of typeof model === 'string' ? [model] : model) {
    const dir = join(work, 'models', name);
    cpSync(join(ensureTestModels(), name), dir, { recursive: true });
    if (options.editConfig) {
      const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
      options.editConfig(config);
      writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    }
  }
  for (const name of options.workflows ?? [])
    cpSync(join(ROOT, 'test', 'fixtures', 'workflows', name), join(work, 'models', name), { recursive: true });
  await options.prepare?.(join(work, 'models'));
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      join(ROOT, 'src', 'cli', 'main.ts'),
      '--models',
      join(work, 'models'),
      '--registry',
      join(work, 'r.db'),
      '--audit-log',
      join(work, 'audit.jsonl'),
      '--allow-root',
      work,
      ...(options.globalArgs ?? []),
      'serve',
      '--http',
      String(options.http ?? 0),
      ...(options.serveArgs ?? []),
    ],
    { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...options.env } },
  );
  let stderr = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = await waitForUrl(child);
  const records = () =>
    stderr
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => {
        try {
          return JSON.parse(line) as LogRecord;
        } catch {
          throw new Error(`not a JSON log line on stderr: ${line}`);
        }
      });
  const waitForRecord = async (match: (r: LogRecord) => boolean, what: string, timeoutMs = 60_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      // A partly written last line is not a record yet.
      const complete = stderr.slice(0, stderr.lastIndexOf('\n') + 1);
      const found = complete
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as LogRecord)
        .find(match);
      if (found) return found;
      if (Date.now() > deadline) throw new Error(`no log record ${what} within ${timeoutMs} ms:\n${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return {
    child,
    work,
    url,
    base: url.replace(/\/mcp$/, ''),
    stderr: () => stderr,
    records,
    waitForRecord,
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}
