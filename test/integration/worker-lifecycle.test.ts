import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { eventLoopSpin } from '../../src/engines/torch/loop-spin.js';
import type { Gateway } from '../../src/gateway.js';
import { openGateway } from '../helpers/gateway.js';
import { ensureTestModels } from '../helpers/models.js';
import { processState, threadCpus, workerPids } from '../helpers/processes.js';
import { waitFor } from '../helpers/wait.js';

/**
 * The gateway in-process with real Python workers: crash recovery, failed loads, and cleanup of
 * shared-memory arenas. (The MCP suites cover the same core through real transports.)
 */

const ownArenas = () => readdirSync('/dev/shm').filter((n) => n.startsWith(`tensorgate-${process.pid}-`));

describe('worker lifecycle', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let models: string;
  let work: string;

  before(async () => {
    models = ensureTestModels();
    work = mkdtempSync(join(tmpdir(), 'tg-life-'));
    writeFileSync('/dev/shm/tensorgate-999999999-stale-in', 'left by a dead gateway');
    gateway = await openGateway(work, {}, (line) => process.stderr.write(`${line}\n`));
  });

  after(async () => {
    await gateway.close();
  });

  interface TestConfig {
    name: string;
    resources: Record<string, unknown>;
    versions: Record<string, { file: string }>;
  }

  /** A test model copied into the work folder under another name, its config changed by `edit`. */
  function copyModel(source: string, name: string, edit: (config: TestConfig) => void): string {
    const dir = join(work, name);
    cpSync(join(models, source), dir, { recursive: true });
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as TestConfig;
    config.name = name;
    edit(config);
    writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    return dir;
  }

  it('removes arenas left behind by dead gateways at start', () => {
    assert.ok(!readdirSync('/dev/shm').includes('tensorgate-999999999-stale-in'));
  });

  it('fails only the running request when a worker dies, then restarts it', async () => {
    const info = await gateway.register(join(models, 'sleepy'));
    assert.equal(info.versions[0]?.state, 'ready');
    const [pid] = workerPids();
    assert.ok(pid, 'one worker is running');
    const running = gateway.infer({ model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } });
    setTimeout(() => process.kill(pid, 'SIGKILL'), 100);
    await assert.rejects(running, { code: 'WORKER_CRASHED' });
    const next = await gateway.infer({ model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } });
    assert.deepEqual(next.outputs[0]?.shape, [1, 4]);
    assert.notEqual(workerPids()[0], pid, 'a new worker serves');
  });

  it('keeps restarting a worker killed while it restarts, one worker at a time, until it serves', async () => {
    const [first] = workerPids();
    assert.ok(first, 'one worker is running');
    process.kill(first, 'SIGKILL');
    // sleepy warms up for a second: each new worker is still loading when it is killed. Three
    // kills would use up the tries of a model that fails to load; a SIGKILL does not count.
    const killed = [first];
    for (let i = 0; i < 3; i++) {
      const restarting = await waitFor('the restarting worker', () =>
        workerPids().find((pid) => !killed.includes(pid)),
      );
      process.kill(restarting, 'SIGKILL');
      killed.push(restarting);
    }
    const served = await gateway.infer({ model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } });
    assert.deepEqual(served.outputs[0]?.shape, [1, 4]);
    // Long enough for a second restart of the same instance, had one been scheduled, to start and load.
    await new Promise((r) => setTimeout(r, 3000));
    const workers = workerPids();
    assert.equal(workers.length, 1, `one worker for one instance, found ${workers.length}`);
    assert.ok(!killed.some((pid) => workers.includes(pid)));
    assert.equal(gateway.modelInfo('sleepy').versions[0]?.state, 'ready');
  });

  it('restarts a worker killed while it spins on its channel, and the new one answers the same', async () => {
    // The longest spin a config allows: after each answer the worker polls its channel for 0.1 s
    // while calls keep coming back to back, so it is running, not asleep, when it is killed.
    const dir = copyModel('adder', 'spinner', (config) => {
      config.resources = { ...config.resources, spin_us: 100_000 };
    });
    const before = workerPids();
    assert.equal((await gateway.register(dir)).versions[0]?.state, 'ready');
    const [pid] = workerPids().filter((p) => !before.includes(p));
    assert.ok(pid, 'the spinner has a worker');
    const call = () => gateway.infer({ model: 'spinner', inputs: { a: [[1, 2]], b: [[10, 20]] } });
    let answer = await call();
    for (let i = 0; i < 3; i++) answer = await call();
    // 'R' is running or runnable: the spin. A worker blocked in recv() would be 'S'.
    assert.equal(processState(pid), 'R', 'the worker spins after answering');
    process.kill(pid, 'SIGKILL');
    const restarted = await waitFor('a new spinner worker', () =>
      workerPids().find((p) => !before.includes(p) && p !== pid),
    );
    await waitFor('the spinner ready again', () =>
      gateway.modelInfo('spinner').versions[0]?.state === 'ready' ? true : undefined,
    );
    const again = await call();
    // The same answer; only the tensor:// handles of the two results differ.
    const values = (r: typeof answer) => r.outputs.map((o) => o.summary);
    assert.deepEqual(values(again), values(answer));
    assert.deepEqual(values(again)[0]?.values, [[11, 22]]);
    assert.ok(workerPids().includes(restarted));
    await gateway.unloadModel('spinner');
  });

  it('keeps its event loop turning while a spinning worker computes, and lets go when the worker dies', async () => {
    // sleepy sleeps 0.5 s per call; with the longest spin a config allows (0.1 s) the gateway's
    // first wait for it begins awake (docs/worker-protocol.md#spinning).
    const dir = copyModel('sleepy', 'sleepy-spin', (config) => {
      config.resources = { ...config.resources, spin_us: 100_000 };
    });
    const before = workerPids();
    assert.equal((await gateway.register(dir)).versions[0]?.state, 'ready');
    const [pid] = workerPids().filter((p) => !before.includes(p));
    assert.ok(pid, 'sleepy-spin has a worker');
    const turnsBefore = eventLoopSpin.turns;
    const sent = performance.now();
    // Before the spin's own deadline (0.1 s after the call): what is seen then is the hold's doing.
    const withinSpin = () => performance.now() - sent < 90;
    const running = gateway.infer({ model: 'sleepy-spin', inputs: { x: [[1, 2, 3, 4]] } });
    // A timer still fires while the loop is held: the gateway serves on while it waits awake.
    await new Promise((r) => setTimeout(r, 20));
    assert.ok(eventLoopSpin.turns > turnsBefore, 'the loop turned while the worker computed');
    if (withinSpin()) assert.equal(eventLoopSpin.spinning, true, 'the loop is held while the worker computes');
    process.kill(pid, 'SIGKILL');
    await assert.rejects(running, { code: 'WORKER_CRASHED' });
    for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
    if (withinSpin()) assert.equal(eventLoopSpin.spinning, false, 'the hold went with the failed request');
    await waitFor('sleepy-spin ready again', () =>
      gateway.modelInfo('sleepy-spin').versions[0]?.state === 'ready' ? true : undefined,
    );
    // The same bytes as the model that does not spin, for the same input.
    const [spun, plain] = await Promise.all([
      gateway.infer({ model: 'sleepy-spin', inputs: { x: [[1.5, -2, 3.25, 4]] } }),
      gateway.infer({ model: 'sleepy', inputs: { x: [[1.5, -2, 3.25, 4]] } }),
    ]);
    assert.deepEqual(spun.outputs[0]?.summary?.values, [[3, -4, 6.5, 8]]);
    assert.deepEqual(spun.outputs[0]?.summary, plain.outputs[0]?.summary);
    // Its answers take 0.5 s, longer than the spin, and it runs on the CPU, whose cores a turning
    // loop would take from forward passes: the next wait is asleep throughout.
    const turnsBeforeSlow = eventLoopSpin.turns;
    await gateway.infer({ model: 'sleepy-spin', inputs: { x: [[1, 2, 3, 4]] } });
    assert.equal(eventLoopSpin.turns, turnsBeforeSlow, 'a slow answer on the CPU is waited for asleep');
    await gateway.unloadModel('sleepy-spin');
  });

  it('reports a model whose weights cannot load as failed, with the reason, and keeps serving others', async () => {
    const broken = copyModel('adder', 'broken', (config) => {
      writeFileSync(
        join(work, 'broken', '1', (config.versions['1'] as { file: string }).file),
        'not a torchscript archive',
      );
    });
    const info = await gateway.register(broken);
    assert.equal(info.versions[0]?.state, 'failed');
    assert.match(info.versions[0]?.error ?? '', /LOAD_FAILED|zip|archive|constants/i);
    await assert.rejects(gateway.infer({ model: 'broken', inputs: { a: [[1]], b: [[1]] } }), {
      code: 'MODEL_NOT_READY',
    });
    await assert.rejects(gateway.register(join(work, 'nowhere')), { code: 'INVALID_CONFIG' });
    const ok = await gateway.infer({ model: 'sleepy', inputs: { x: [[0, 0, 0, 0]] } });
    assert.equal(ok.model, 'sleepy');
  });

  it('stops a worker that does not load within resources.load_timeout_s, and reports why', async () => {
    // sleepy warms up for a second; a 0.3 s budget runs out while it does.
    const slow = copyModel('sleepy', 'slow', (config) => {
      config.resources = { ...config.resources, load_timeout_s: 0.3 };
    });
    const before = workerPids();
    const info = await gateway.register(slow);
    assert.equal(info.versions[0]?.state, 'failed');
    assert.match(info.versions[0]?.error ?? '', /did not load within 0\.3 s \(resources\.load_timeout_s\)/);
    await waitFor('the stopped worker gone', () =>
      workerPids().every((pid) => before.includes(pid)) ? true : undefined,
    );
    const ok = await gateway.infer({ model: 'sleepy', inputs: { x: [[0, 0, 0, 0]] } });
    assert.equal(ok.model, 'sleepy');
  });

  it("runs each instance's worker, every thread of it, on its share of resources.cpus", async () => {
    const mine = threadCpus(process.pid)[0] ?? [];
    const cpus = mine.slice(0, 2);
    const before = workerPids();
    const placed = copyModel('mlp', 'placed', (config) => {
      config.resources = { ...config.resources, instances: 2, cpus };
    });
    assert.equal((await gateway.register(placed)).versions[0]?.state, 'ready');
    const started = workerPids().filter((pid) => !before.includes(pid));
    assert.equal(started.length, 2);
    // Two CPUs: one for each instance; one CPU: both share it.
    const expected = cpus.length === 2 ? [[cpus[0]], [cpus[1]]] : [cpus, cpus];
    const placements = started.map((pid) => {
      const threads = threadCpus(pid);
      assert.ok(
        threads.every((t) => JSON.stringify(t) === JSON.stringify(threads[0])),
        `every thread of worker ${pid} runs where the worker does: ${JSON.stringify(threads)}`,
      );
      return threads[0];
    });
    assert.deepEqual(
      placements.sort((a, b) => (a?.[0] ?? 0) - (b?.[0] ?? 0)),
      expected,
    );
    await gateway.register(join(models, 'mlp'));
    const x = [[0.5, -1, 2, 0.25]];
    const [answer, reference] = await Promise.all([
      gateway.infer({ model: 'placed', inputs: { x } }),
      gateway.infer({ model: 'mlp', inputs: { x } }),
    ]);
    assert.deepEqual(
      answer.outputs.map((o) => o.summary.values),
      reference.outputs.map((o) => o.summary.values),
    );
    await gateway.unloadModel('placed');
    await gateway.unloadModel('mlp');
  });

  it('fails a version whose resources.cpus this machine lacks, naming them, and keeps serving', async () => {
    const nowhere = copyModel('mlp', 'nowhere-cpus', (config) => {
      config.resources = { ...config.resources, cpus: [1023] };
    });
    const info = await gateway.register(nowhere);
    assert.equal(info.versions[0]?.state, 'failed');
    assert.match(info.versions[0]?.error ?? '', /resources\.cpus \[1023\] cannot be had/);
    const ok = await gateway.infer({ model: 'sleepy', inputs: { x: [[0, 0, 0, 0]] } });
    assert.equal(ok.model, 'sleepy');
  });

  it('removes its arenas and stops its workers on close', async () => {
    assert.ok(ownArenas().length > 0);
    await gateway.close();
    assert.deepEqual(ownArenas(), []);
    assert.deepEqual(workerPids(), []);
  });
});
