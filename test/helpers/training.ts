import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { PYTHON, ROOT } from './models.js';

/**
 * Real parts for the training control-plane tests: the CLI serving MCP over stdio on a runs
 * directory of its own, and real PyTorch training processes (test/fixtures/trainer.py) attached
 * to it with tensorgate.train.
 */

export interface TrainingServer {
  client: Client;
  transport: StdioClientTransport;
  close: () => Promise<void>;
}

export function trainingWorkDir(): { work: string; runsDir: string; auditLog: string } {
  const work = mkdtempSync(join(tmpdir(), 'tg-train-'));
  const runsDir = join(work, 'runs');
  mkdirSync(runsDir);
  return { work, runsDir, auditLog: join(work, 'audit.jsonl') };
}

export async function startTrainingServer(work: string, runsDir: string, auditLog: string): Promise<TrainingServer> {
  mkdirSync(join(work, 'models'), { recursive: true });
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [
      join(ROOT, 'bin', 'tensorgate.js'),
      '--models',
      join(work, 'models'),
      '--registry',
      join(work, 'registry.db'),
      '--runs-dir',
      runsDir,
      '--audit-log',
      auditLog,
      'serve',
      '--stdio',
    ],
    stderr: 'ignore',
    cwd: ROOT,
  });
  const client = new Client({ name: 'tensorgate-tests', version: '0.0.0' });
  await client.connect(transport);
  return { client, transport, close: () => client.close() };
}

export interface TrainerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Its stdout's JSON lines (the run id, the step it stopped at). */
  lines: Record<string, unknown>[];
  stderr: string;
}

export interface Trainer {
  child: ChildProcess;
  runId: Promise<string>;
  exited: Promise<TrainerExit>;
  out: string;
  /** The per-step records the loop wrote so far. */
  records: () => { step: number; lr: number; momentum: number; hparams: Record<string, unknown> }[];
}

export function startTrainer(
  runsDir: string,
  work: string,
  args: string[] = [],
  env: Record<string, string> = {},
  tag = 'trainer',
): Trainer {
  const out = join(work, `${tag}-${Math.random().toString(36).slice(2, 8)}.jsonl`);
  const child = spawn(PYTHON, [join(ROOT, 'test/fixtures/trainer.py'), '--out', out, ...args], {
    cwd: ROOT,
    env: { ...process.env, PYTHONPATH: join(ROOT, 'python'), TENSORGATE_RUNS_DIR: runsDir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk) => {
    stderr += chunk;
  });
  const lines: Record<string, unknown>[] = [];
  const runId = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      lines.push(parsed);
      if (typeof parsed.run_id === 'string') resolve(parsed.run_id);
    });
    child.once('exit', (code) => reject(new Error(`trainer exited (${code}) before attaching: ${stderr}`)));
  });
  runId.catch(() => {});
  const exited = new Promise<TrainerExit>((resolve) =>
    // 'close', not 'exit': by then stderr has been read to its end.
    child.once('close', (code, signal) => resolve({ code, signal, lines, stderr })),
  );
  // The trainer creates its output file at its first step: until then there are no records yet.
  // A line still being written is not a record yet either.
  const records = () => {
    const text = existsSync(out) ? readFileSync(out, 'utf8') : '';
    return text
      .slice(0, text.lastIndexOf('\n') + 1)
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l));
  };
  return { child, runId, exited, out, records };
}

export interface RunReport {
  id: string;
  state: string;
  step: number;
  hyperparameters: { name: string; current: unknown; pending?: { value: unknown; status: string } }[];
  metrics: Record<string, { count: number; last: { step: number; value: number } }>;
  series: Record<string, [number, number][]>;
  changes: { version: number | null; status: string; applied_step: number | null; apply_at_step: number | null }[];
  last_checkpoint: { step: number; path: string | null } | null;
  ranks?: { rank: number; step: number; applied_version: number }[];
}

export async function getRun(client: Client, run: string, extra: Record<string, unknown> = {}): Promise<RunReport> {
  const result = await client.callTool({ name: 'get_run', arguments: { run, ...extra } });
  if (result.isError) throw new Error(JSON.stringify(result.content));
  return result.structuredContent as unknown as RunReport;
}

export async function call(client: Client, name: string, args: Record<string, unknown>) {
  const result = await client.callTool({ name, arguments: args });
  const text = (result.content as { type: string; text?: string }[])[0]?.text ?? '';
  return { isError: result.isError === true, text, structured: result.structuredContent as Record<string, unknown> };
}
