import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { arenaPath, InputArena } from '../../src/engines/torch/arena.js';
import { WorkerProcess } from '../../src/engines/torch/worker-process.js';
import type { TensorgateError } from '../../src/errors.js';
import type { Gateway } from '../../src/gateway.js';
import type { LogFields } from '../../src/observability/logger.js';
import { openGateway } from '../helpers/gateway.js';
import { ensureTestModels } from '../helpers/models.js';
import { forkServerPids, processState, workerPids } from '../helpers/processes.js';
import { waitFor } from '../helpers/wait.js';

/**
 * Workers forked from a fork server (docs/worker-protocol.md#fork-server), seen from the gateway:
 * real fork servers, real workers connecting back, real ends reported.
 */

const parentOf = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
};

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const run = promisify(execFile);

let tag = 0;
const arenas: InputArena[] = [];
const started: WorkerProcess[] = [];

/** A worker with arenas of its own, its log records kept in `records`, in order. */
function startWorker(records: { msg: string; fields?: LogFields }[] = [], arenaIn?: string): WorkerProcess {
  const arena = new InputArena(arenaPath(`fork-test-${++tag}-in`), 1 << 20);
  arenas.push(arena);
  const worker = new WorkerProcess({
    arenaIn: arenaIn ?? arena.path,
    arenaOut: arenaPath(`fork-test-${tag}-out`),
    outBytes: 1 << 20,
    label: `fork-test#${tag}`,
    onLog: (msg, fields) => records.push({ msg, ...(fields ? { fields } : {}) }),
  });
  started.push(worker);
  return worker;
}

const exitOf = (worker: WorkerProcess) =>
  new Promise<TensorgateError>((resolve) => worker.onExitOnce((err) => resolve(err)));

describe('workers forked from a fork server', { timeout: 180_000 }, () => {
  const previous = process.env.TENSORGATE_WORKER_START;
  before(() => {
    process.env.TENSORGATE_WORKER_START = 'fork';
  });
  after(() => {
    if (previous === undefined) delete process.env.TENSORGATE_WORKER_START;
    else process.env.TENSORGATE_WORKER_START = previous;
    for (const worker of started) worker.kill();
    for (const arena of arenas) arena.close();
  });

  it('are children of one fork server, say hello as themselves, and log with their pid', async () => {
    const records: { msg: string; fields?: LogFields }[] = [];
    const workers = [startWorker(records), startWorker(records)];
    const hellos = await Promise.all(workers.map((w) => w.hello));
    const [server, ...others] = forkServerPids();
    assert.ok(server, 'a fork server runs');
    assert.deepEqual(others, [], 'one fork server for both');
    for (const [i, worker] of workers.entries()) {
      assert.equal(hellos[i]?.pid, worker.pid);
      assert.equal(parentOf(worker.pid as number), server);
      assert.equal(hellos[i]?.reads_files, true, "it opens the gateway's descriptors, not its parent's");
      assert.ok(workerPids().includes(worker.pid as number));
    }
    assert.deepEqual(await workers[0]?.request('ping'), {
      channel: { spin_us: 0, spins: 0, spin_hits: 0 },
      pipelined: 0,
    });
    await Promise.all(workers.map((w) => w.shutdown()));
    const exits = records.filter((r) => r.msg === 'control channel closed; exiting' || r.msg.includes('shutdown'));
    assert.ok(exits.every((r) => typeof r.fields?.pid === 'number'));
    assert.deepEqual(
      workerPids().filter((pid) => workers.some((w) => w.pid === pid)),
      [],
    );
  });

  it('report a worker whose fork server died as crashed, and the next start brings a new one', async () => {
    const worker = startWorker();
    await worker.hello;
    const [server] = forkServerPids();
    assert.ok(server);
    const ended = exitOf(worker);
    process.kill(server, 'SIGKILL');
    const err = await ended;
    assert.equal(err.code, 'WORKER_CRASHED');
    assert.match(err.message, /ended with its fork server, which exited with signal SIGKILL/);
    await waitFor('the worker to be gone', () => (workerPids().includes(worker.pid as number) ? undefined : true));

    const next = startWorker();
    assert.equal((await next.hello).pid, next.pid);
    const [newServer] = forkServerPids();
    assert.ok(newServer && newServer !== server, 'a new fork server');
    await next.shutdown();
  });

  it('kills a worker asked to stop before the fork server has answered', async () => {
    const worker = startWorker();
    const ended = exitOf(worker);
    worker.kill();
    const err = await ended;
    assert.match(err.message, /exited with signal SIGKILL/);
    await assert.rejects(worker.hello, { code: 'WORKER_CRASHED' });
  });

  it("reports a worker's end after the last words it wrote on stderr, however many", async () => {
    // A model whose load writes 2 MB to stderr, then a last line, then ends the process: the
    // fork server's report of that end overtakes most of it unless the gateway waits.
    const dir = mkdtempSync(join(tmpdir(), 'tg-fork-words-'));
    writeFileSync(
      join(dir, 'model.py'),
      'import os, sys\n\ndef build():\n    sys.stderr.write(("x" * 999 + "\\n") * 2000 + "the last words\\n")\n' +
        '    sys.stderr.flush()\n    os._exit(3)\n',
    );
    writeFileSync(join(dir, 'none.pt'), '');
    const records: { msg: string; fields?: LogFields }[] = [];
    const worker = startWorker(records);
    let endedAt = -1;
    worker.onExitOnce(() => {
      endedAt = records.length;
    });
    await worker.hello;
    const model = {
      name: 'words',
      version: '1',
      format: 'eager',
      entry: 'model:build',
      file: join(dir, 'none.pt'),
      code_dir: dir,
      device: 'cpu',
      threads: 1,
      warmup_runs: 0,
      inputs: [{ name: 'x', dtype: 'float32', shape: [-1, 4] }],
      outputs: [{ name: 'y', dtype: 'float32', shape: [-1, 4] }],
    };
    await assert.rejects(worker.request('load', { model, variants: {} }), {
      code: 'WORKER_CRASHED',
      message: /code 3/,
    });
    const last = records.findIndex((r) => r.msg === 'the last words');
    assert.equal(records.filter((r) => r.msg.startsWith('xxx')).length, 2000);
    assert.ok(last >= 0 && last < endedAt, `the last words (record ${last}) before the end (${endedAt})`);
  });

  it('leave nothing behind when their gateway exits: no process, no socket folder', async () => {
    // A gateway of its own: a process that starts a worker, then exits without closing anything.
    const script = [
      "import { InputArena, arenaPath } from './src/engines/torch/arena.ts';",
      "import { WorkerProcess } from './src/engines/torch/worker-process.ts';",
      "const arena = new InputArena(arenaPath('exit-in'), 1 << 20);",
      "const worker = new WorkerProcess({ arenaIn: arena.path, arenaOut: arenaPath('exit-out'), outBytes: 1 << 20, label: 'exit' });",
      'console.log(JSON.stringify({ gateway: process.pid, worker: (await worker.hello).pid }));',
      'arena.close();',
      'process.exit(0);',
    ].join('\n');
    const { stdout } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      env: { ...process.env, TENSORGATE_WORKER_START: 'fork' },
    });
    const pids = JSON.parse(stdout) as { gateway: number; worker: number };
    assert.ok(!readdirSync(tmpdir()).some((name) => name.startsWith(`tensorgate-${pids.gateway}-fork-`)));
    const ended = () => {
      try {
        return processState(pids.worker) === 'Z' ? true : undefined; // dead, waiting for init to reap it
      } catch {
        return true; // gone
      }
    };
    await waitFor('its worker to end', ended);
  });

  it('are spawned instead with TENSORGATE_WORKER_START=spawn, and a wrong value is refused', async () => {
    process.env.TENSORGATE_WORKER_START = 'spawn';
    try {
      const worker = startWorker();
      await worker.hello;
      assert.equal(parentOf(worker.pid as number), process.pid);
      await worker.shutdown();
      process.env.TENSORGATE_WORKER_START = 'vfork';
      assert.throws(() => startWorker(), { code: 'LOAD_FAILED', message: /use "fork" or "spawn"/ });
    } finally {
      process.env.TENSORGATE_WORKER_START = 'fork';
    }
  });
});

describe('a gateway whose fork server dies', { timeout: 180_000 }, () => {
  let gateway: Gateway;
  const stale = join(tmpdir(), 'tensorgate-999999999-fork-left');

  before(async () => {
    process.env.TENSORGATE_WORKER_START = 'fork';
    mkdirSync(stale, { recursive: true });
    writeFileSync(join(stale, 'workers.sock'), '');
    gateway = await openGateway(mkdtempSync(join(tmpdir(), 'tg-fork-')), {});
  });
  after(async () => {
    await gateway.close();
    delete process.env.TENSORGATE_WORKER_START;
  });

  it('removes the socket folders of dead gateways at start', () => {
    assert.equal(existsSync(stale), false);
  });

  /** The first answer `model` gives once it serves again (WORKER_CRASHED while it restarts). */
  const servedAgain = (model: string, inputs: Record<string, number[][]>) =>
    waitFor(`${model} to serve again`, () => gateway.infer({ model, inputs }).catch(() => undefined));

  it('restarts every worker it had and serves again', async () => {
    const models = ensureTestModels();
    await gateway.register(join(models, 'adder'));
    await gateway.register(join(models, 'row_sum'));
    const before = workerPids();
    assert.equal(before.length, 2);
    for (const server of forkServerPids()) process.kill(server, 'SIGKILL');
    // Until the kernel has ended them (their parent's death signal), the old workers may still
    // answer: wait for two new ones, forked by a new fork server.
    await waitFor('two new workers', () => {
      const now = workerPids();
      return now.length === 2 && now.every((pid) => !before.includes(pid)) ? now : undefined;
    });
    const sum = await servedAgain('row_sum', { x: [[1, 2, 3, 4]] });
    assert.deepEqual(sum.outputs[0]?.shape, [1]);
    const added = await servedAgain('adder', { a: [[1, 2, 3, 4]], b: [[1, 1, 1, 1]] });
    assert.deepEqual(added.outputs[0]?.shape, [1, 4]);
    const serving = new Set([
      ...(gateway.poolStats('row_sum', '1')?.pids ?? []),
      ...(gateway.poolStats('adder', '1')?.pids ?? []),
    ]);
    assert.deepEqual([...serving].sort(), workerPids().sort(), 'the new workers serve');
  });
});
