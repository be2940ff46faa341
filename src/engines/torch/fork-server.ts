import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { z } from 'zod';
import { type Logger, noLogger } from '../../observability/logger.js';
import { isAlive } from './arena.js';
import { encodeFrame, FrameDecoder } from './frame.js';
import { forwardLines, type LaunchedWorker, type WorkerStreams } from './launch.js';

/**
 * Workers forked from one Python process that has imported torch once (`tensorgate.forkserver`,
 * docs/worker-protocol.md#fork-server). A spawned worker spends about a second of CPU importing
 * torch before it can say hello, and holds some 290 MB of memory of its own for it; a forked one
 * says hello within milliseconds and shares those pages with its fork server and siblings.
 *
 * The fork server's channel is fd 3, as a worker's. A forked worker is not the gateway's child:
 * it connects back to a Unix socket in a folder only this user can enter, three times (channel,
 * stdout, stderr), each led by a token the gateway made for that fork. The fork server reaps its
 * workers and reports each end; when it dies, its workers die with it (the kernel's parent-death
 * signal), and each is reported ended.
 */

/** How long the streams of a worker that ended may take to drain before its end is reported. */
const DRAIN_MS = 2000;
/** A stream's first line, `<token> <stream>\n`, is short: more than this is not a worker. */
const MAX_HEAD_BYTES = 256;

const ForkServerMessageSchema = z.union([
  z.object({ op: z.literal('exit'), pid: z.number(), code: z.number().optional(), signal: z.string().optional() }),
  z.object({ id: z.number(), ok: z.literal(true), result: z.record(z.string(), z.unknown()) }),
  z.object({ id: z.number().nullable(), ok: z.literal(false), error: z.object({ message: z.string() }) }),
]);

const servers = new Map<string, ForkServer>();

/** The folders of the sockets forked workers connect to: `tensorgate-<gateway pid>-fork-XXXXXX`. */
const FORK_DIR = /^tensorgate-(\d+)-fork-/;

/**
 * Removes the socket folders of fork servers whose gateway died without removing them (one that
 * exits removes its own: `removeOwnForkDirs`). Returns the folders' names.
 */
export function sweepStaleForkDirs(dir = tmpdir()): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  return names.filter((name) => {
    const pid = Number(FORK_DIR.exec(name)?.[1] ?? Number.NaN);
    if (Number.isNaN(pid) || pid === process.pid || isAlive(pid)) return false;
    rmSync(join(dir, name), { recursive: true, force: true });
    return true;
  });
}

/** The pids of this process's running fork servers. */
export function forkServerPids(): number[] {
  return [...servers.values()].flatMap((server) => (server.running && server.pid !== undefined ? [server.pid] : []));
}

/** At exit, the socket folders of this process's fork servers (they end with it). */
function removeOwnForkDirs(): void {
  for (const server of servers.values()) server.removeDir();
}

/**
 * Forks a worker from the fork server of this interpreter and environment, started on first use.
 * The environment a fork server was started with is what torch read at import (OMP_NUM_THREADS,
 * TORCH_*): a worker asking for another gets another fork server.
 */
export function forkWorker(python: string, argv: string[], env: NodeJS.ProcessEnv, log: Logger): LaunchedWorker {
  const key = `${python}\0${JSON.stringify(env)}`;
  let server = servers.get(key);
  if (!server?.running) {
    if (servers.size === 0) process.once('exit', removeOwnForkDirs);
    server = new ForkServer(python, env, () => servers.delete(key));
    servers.set(key, server);
  }
  return server.fork(argv, env, log);
}

class ForkServer {
  private readonly child: ChildProcess;
  private readonly control: Socket;
  private readonly listener: Server;
  private readonly dir: string;
  private readonly decoder = new FrameDecoder();
  private nextId = 1;
  private readonly replies = new Map<number, ForkedWorker>();
  /** Forked or being forked, by token, until their streams are all in. */
  private readonly arriving = new Map<string, ForkedWorker>();
  /** Forked and not reported ended, by pid. */
  private readonly live = new Map<number, ForkedWorker>();
  private endReason: string | undefined;
  /** Where the fork server's own output goes: the log of the worker that asked last. */
  private log: Logger = noLogger;

  constructor(
    python: string,
    env: NodeJS.ProcessEnv,
    private readonly onEnd: () => void,
  ) {
    // The folder's name carries the gateway's pid, as its arenas' do: `ps` shows whose it is.
    this.dir = mkdtempSync(join(tmpdir(), `tensorgate-${process.pid}-fork-`));
    const path = join(this.dir, 'workers.sock');
    this.listener = createServer((sock) => this.onConnection(sock));
    this.listener.listen(path);
    this.listener.on('error', (err) => this.end(`could not listen at ${path}: ${err.message}`));
    this.child = spawn(python, ['-m', 'tensorgate.forkserver', '--connect', path], {
      stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
      env,
    });
    this.control = this.child.stdio[3] as Socket;
    const fields = { forkServer: this.child.pid };
    forwardLines(this.child.stdout as Readable, (line) => this.log(line, { ...fields, stream: 'stdout' }));
    forwardLines(this.child.stderr as Readable, (line) =>
      this.log(line, { ...fields, level: 'warn', stream: 'stderr' }),
    );
    this.control.on('data', (chunk: Buffer) => {
      try {
        for (const message of this.decoder.push(chunk)) this.onMessage(ForkServerMessageSchema.parse(message));
      } catch (err) {
        // A stream that cannot be read cannot be trusted: end it, and its workers with it.
        this.log(`fork server ${this.child.pid} sent what is not its protocol: ${(err as Error).message}`, {
          level: 'error',
        });
        this.child.kill('SIGKILL');
      }
    });
    this.control.on('error', () => {}); // The close handler reports the end.
    this.child.on('error', (err) => this.end(`could not be started (${python}: ${err.message})`));
    // 'close', not 'exit': after its channel is read to the end, so every exit it reported is in.
    this.child.on('close', (code, signal) => this.end(`exited with ${signal ? `signal ${signal}` : `code ${code}`}`));
    // Idle, it keeps no process alive: a worker's own streams do while the worker lives.
    this.child.unref();
    for (const handle of [this.control, this.child.stdout, this.child.stderr] as Socket[]) handle.unref();
    this.listener.unref();
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return this.endReason === undefined;
  }

  fork(argv: string[], env: NodeJS.ProcessEnv, log: Logger): ForkedWorker {
    this.log = log;
    const worker = new ForkedWorker((pid) => this.send({ op: 'kill', pid }));
    if (this.endReason) {
      worker.ended(`could not be forked: its fork server ${this.endReason}`);
      return worker;
    }
    const token = randomUUID();
    this.arriving.set(token, worker);
    worker.onExit(() => this.arriving.delete(token));
    const id = this.send({ op: 'fork', argv, env, token });
    this.replies.set(id, worker);
    return worker;
  }

  removeDir(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }

  private send(message: Record<string, unknown>): number {
    const id = this.nextId++;
    if (this.running) this.control.write(encodeFrame({ id, ...message }));
    return id;
  }

  private onMessage(message: z.infer<typeof ForkServerMessageSchema>): void {
    if ('op' in message) {
      const worker = this.live.get(message.pid);
      this.live.delete(message.pid);
      const how = message.signal ? `signal ${message.signal}` : `code ${message.code}`;
      worker?.ended(`exited with ${how}`, message.signal as NodeJS.Signals | undefined);
      return;
    }
    const worker = message.id === null ? undefined : this.replies.get(message.id);
    if (message.id !== null) this.replies.delete(message.id);
    if (!worker) return; // a kill's answer: the exit report tells the rest
    if (!message.ok) {
      worker.ended(`could not be forked: ${message.error.message}`);
      return;
    }
    const pid = z.number().parse(message.result.pid);
    this.live.set(pid, worker);
    worker.forked(pid);
  }

  /** A connection from a forked worker: its first line names the fork and the stream. */
  private onConnection(sock: Socket): void {
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const newline = head.indexOf(10);
      if (newline < 0) {
        if (head.length > MAX_HEAD_BYTES) sock.destroy();
        return;
      }
      sock.off('data', onData);
      // Paused until the worker's owner listens: WorkerStreams says so.
      sock.pause();
      if (head.length > newline + 1) sock.unshift(head.subarray(newline + 1));
      const [token = '', stream = ''] = head.subarray(0, newline).toString('utf8').split(' ');
      const worker = this.arriving.get(token);
      if (!worker?.arrived(stream, sock)) sock.destroy();
      else if (worker.hasAllStreams) this.arriving.delete(token);
    };
    sock.on('data', onData);
    sock.on('error', () => {}); // A worker's end is reported by the fork server.
  }

  private end(reason: string): void {
    if (this.endReason) return;
    this.endReason = reason;
    this.onEnd();
    this.listener.close();
    this.removeDir();
    this.control.destroy();
    // Its workers died with it (each asked the kernel for SIGKILL when it dies).
    const orphans = new Set([...this.replies.values(), ...this.arriving.values(), ...this.live.values()]);
    for (const worker of orphans) {
      worker.ended(`ended with its fork server, which ${reason}`, worker.pid === undefined ? undefined : 'SIGKILL');
    }
    this.replies.clear();
    this.arriving.clear();
    this.live.clear();
  }
}

class ForkedWorker implements LaunchedWorker {
  pid: number | undefined;
  readonly streams: Promise<WorkerStreams>;
  private resolveStreams!: (streams: WorkerStreams) => void;
  private readonly parts: Partial<Record<'channel' | 'stdout' | 'stderr', Socket>> = {};
  private readonly exitListeners: ((reason: string, signal?: NodeJS.Signals) => void)[] = [];
  private hasEnded = false;
  private killWanted = false;
  /** Whether the owner has the streams (and so reads them to their end). */
  private handedOver = false;

  constructor(private readonly requestKill: (pid: number) => void) {
    this.streams = new Promise((resolve) => {
      this.resolveStreams = resolve;
    });
  }

  get hasAllStreams(): boolean {
    return Boolean(this.parts.channel && this.parts.stdout && this.parts.stderr);
  }

  forked(pid: number): void {
    this.pid = pid;
    if (this.killWanted) this.requestKill(pid);
    this.settleStreams();
  }

  arrived(stream: string, sock: Socket): boolean {
    if (this.hasEnded || (stream !== 'channel' && stream !== 'stdout' && stream !== 'stderr') || this.parts[stream]) {
      return false;
    }
    this.parts[stream] = sock;
    this.settleStreams();
    return true;
  }

  private settleStreams(): void {
    const { channel, stdout, stderr } = this.parts;
    if (this.pid === undefined || !channel || !stdout || !stderr) return;
    this.handedOver = true;
    this.resolveStreams({ channel, stdout, stderr });
  }

  kill(): void {
    if (this.hasEnded) return;
    if (this.pid === undefined) this.killWanted = true;
    else this.requestKill(this.pid);
  }

  onExit(listener: (reason: string, signal?: NodeJS.Signals) => void): void {
    this.exitListeners.push(listener);
  }

  /**
   * The worker ended (or never began). Reported once what it wrote before it ended has been
   * read: the fork server's report travels on another socket and may overtake the worker's last
   * answer or its last words on stderr.
   */
  ended(reason: string, signal?: NodeJS.Signals): void {
    if (this.hasEnded) return;
    this.hasEnded = true;
    const streams = Object.values(this.parts);
    // Streams no one reads would never end: nothing to wait for.
    const draining = this.handedOver ? streams.filter((sock) => !sock.destroyed) : [];
    let reported = false;
    const report = () => {
      if (reported) return;
      reported = true;
      clearTimeout(timer);
      for (const sock of streams) sock.destroy();
      for (const listener of this.exitListeners) listener(reason, signal);
    };
    let open = draining.length;
    const timer = setTimeout(report, open ? DRAIN_MS : 0);
    for (const sock of draining) sock.once('close', () => --open === 0 && report());
  }
}
