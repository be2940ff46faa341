import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';

/**
 * Runs a command now and then (nvidia-smi, every few seconds) through one long-lived `/bin/sh`, so
 * that the gateway forks once, not once per run.
 *
 * Node starts a child with fork(2), which copies the page tables of the whole process while the
 * event loop waits: about 3 ms per 100 MB of resident memory on a 2-core VM (3.1 ms for the
 * 174 MB process of bench/metrics-overhead; 16 ms, 140 ms at worst, for one of 533 MB). Every
 * request in flight waited that long each time the GPU sampler ran nvidia-smi, twice every five
 * seconds. A shell forks from its own few megabytes instead, outside the gateway.
 *
 * Commands run one at a time. Each is written to the shell as its arguments single-quoted, so
 * nothing in them is interpreted, followed by a line that prints a marker no output can hold and
 * the exit status; stdin is /dev/null and stderr is dropped. A command that outlasts its timeout
 * ends the shell and the command with it (their process group); the next run starts a new shell.
 */
export class CommandShell {
  private shell: ChildProcess | undefined;
  private readonly marker = randomBytes(12).toString('hex');
  /** The line that ends a command's output: the marker and its exit status. */
  private readonly ending = new RegExp(`\\n${this.marker} (\\d+)\\n`);
  private output = '';
  private current: { resolve: (text: string) => void; reject: (err: Error) => void } | undefined;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly timeoutMs = 5000) {}

  /** The command's standard output; rejects when it exits non-zero, times out, or cannot run. */
  run(argv: string[]): Promise<string> {
    const result = this.queue.then(() => this.runNow(argv));
    this.queue = result.catch(() => {});
    return result;
  }

  /** Ends the shell (and a command it runs); a later run starts another. */
  close(): void {
    const shell = this.shell;
    this.shell = undefined;
    if (shell?.pid !== undefined && shell.exitCode === null) {
      try {
        process.kill(-shell.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    this.settle(new Error('the command shell was closed'));
  }

  /** The shell's pid while it runs. */
  get pid(): number | undefined {
    return this.shell?.pid;
  }

  private runNow(argv: string[]): Promise<string> {
    const shell = this.shell ?? this.start();
    const stdout = shell.stdout as unknown as Refable;
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.settle(new Error(`${argv[0]} did not finish within ${this.timeoutMs} ms`));
        this.close();
      }, this.timeoutMs);
      timer.unref();
      // While a command runs, its answer keeps the event loop alive (as a child of execFile would).
      stdout.ref();
      const done = () => {
        clearTimeout(timer);
        stdout.unref();
      };
      this.output = '';
      this.current = {
        resolve: (text) => {
          done();
          resolve(text);
        },
        reject: (err) => {
          done();
          reject(err);
        },
      };
      shell.stdin?.write(
        `${argv.map(quote).join(' ')} </dev/null 2>/dev/null; printf '\\n${this.marker} %s\\n' "$?"\n`,
      );
    });
  }

  private start(): ChildProcess {
    // Its own process group, so that a command it runs ends with it on a timeout.
    const shell = spawn('/bin/sh', [], { stdio: ['pipe', 'pipe', 'ignore'], detached: true });
    this.shell = shell;
    shell.stdout?.setEncoding('utf8');
    shell.stdout?.on('data', (chunk: string) => {
      if (this.shell === shell) this.onOutput(chunk);
    });
    shell.on('error', (err) => this.ended(shell, err));
    shell.on('exit', () => this.ended(shell, new Error('the command shell exited')));
    shell.stdin?.on('error', () => {}); // a shell gone meanwhile: its exit says so
    // An idle shell does not keep the gateway's event loop alive.
    shell.unref();
    (shell.stdin as unknown as Refable).unref();
    (shell.stdout as unknown as Refable).unref();
    return shell;
  }

  private onOutput(chunk: string): void {
    this.output += chunk;
    const end = this.ending.exec(this.output);
    if (!end) return;
    const text = this.output.slice(0, end.index);
    const status = Number(end[1]);
    this.output = '';
    const current = this.current;
    this.current = undefined;
    if (status === 0) current?.resolve(text);
    else current?.reject(new Error(`exit status ${status}`));
  }

  /** The shell ended or could not start: what it was running fails; the next run starts another. */
  private ended(shell: ChildProcess, err: Error): void {
    if (this.shell !== shell) return; // one already replaced (closed): nothing of it is pending
    this.shell = undefined;
    this.settle(err);
  }

  private settle(err: Error): void {
    const current = this.current;
    this.current = undefined;
    current?.reject(err);
  }
}

/** A pipe's handle: whether it keeps the event loop alive. */
interface Refable {
  ref(): void;
  unref(): void;
}

/** One argument for sh, taken literally. */
function quote(arg: string): string {
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}
