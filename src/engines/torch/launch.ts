import { spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';

/**
 * How a worker process comes to be: spawned by the gateway (`spawnWorker`), or forked by a fork
 * server (fork-server.ts). Either way the gateway ends up with the same three streams and the
 * same news of the process's end.
 */

/** A worker's streams: its control channel (its fd 3), stdout and stderr. */
export interface WorkerStreams {
  channel: Socket;
  stdout: Readable;
  stderr: Readable;
}

/** A worker process as started, however it was. */
export interface LaunchedWorker {
  /** Known once the process exists: at once when spawned, at the fork server's answer when forked. */
  readonly pid: number | undefined;
  /**
   * Its streams, once connected; never settles for a worker that ended first. They may be
   * paused: the owner resumes them after adding its listeners.
   */
  readonly streams: Promise<WorkerStreams>;
  /** SIGKILL, to this process only (a pid the system gave to another since is never hit). */
  kill(): void;
  /** Called once: the process ended (`reason` says how, for an error message), or never began. */
  onExit(listener: (reason: string, signal?: NodeJS.Signals) => void): void;
}

/** Spawns `python -m tensorgate.worker ARGV`, its control channel a Unix socket pair on fd 3. */
export function spawnWorker(python: string, argv: string[], env: NodeJS.ProcessEnv): LaunchedWorker {
  const child = spawn(python, ['-m', 'tensorgate.worker', ...argv], {
    // fd 3 is a Unix socket pair: the control channel. No path on disk, EOF when either side dies.
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    env,
  });
  const listeners: ((reason: string, signal?: NodeJS.Signals) => void)[] = [];
  let ended = false;
  const end = (reason: string, signal?: NodeJS.Signals) => {
    if (ended) return;
    ended = true;
    for (const listener of listeners) listener(reason, signal);
  };
  child.on('error', (err) => end(`could not start ${python}: ${err.message}`));
  child.on('exit', (code, signal) =>
    end(`exited with ${signal ? `signal ${signal}` : `code ${code}`}`, signal ?? undefined),
  );
  return {
    pid: child.pid,
    streams: Promise.resolve({
      channel: child.stdio[3] as Socket,
      stdout: child.stdout as Readable,
      stderr: child.stderr as Readable,
    }),
    kill: () => child.kill('SIGKILL'),
    onExit: (listener) => listeners.push(listener),
  };
}

/** Calls `sink` with each non-blank line of `stream`, the last one even without its newline. */
export function forwardLines(stream: Readable, sink: (line: string) => void): void {
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    const lines = (rest + chunk).split('\n');
    rest = lines.pop() ?? '';
    for (const line of lines) if (line.trim()) sink(line);
  });
  stream.on('end', () => {
    if (rest.trim()) sink(rest);
  });
}
