import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../bench/peers/harness.js';
import { RunFileHandle } from '../../src/training/run-file.js';
import {
  call,
  getRun,
  startTrainer,
  startTrainingServer,
  type Trainer,
  type TrainingServer,
  trainingWorkDir,
} from '../helpers/training.js';
import { waitFor } from '../helpers/wait.js';

/**
 * The training control plane end to end: real PyTorch training processes attached with
 * tensorgate.train, the real server (`tensorgate serve --stdio`) and the official MCP client.
 */

const { work, runsDir, auditLog } = trainingWorkDir();
let server: TrainingServer;
const trainers: Trainer[] = [];

function trainer(args: string[], env: Record<string, string> = {}, tag?: string): Trainer {
  const t = startTrainer(runsDir, work, args, env, tag);
  trainers.push(t);
  return t;
}

async function atStep(run: string, step: number) {
  return waitFor(`${run} at step ${step}`, async () => {
    const report = await getRun(server.client, run, { points: 0 });
    return report.step >= step ? report : undefined;
  });
}

async function applied(run: string, version: number) {
  return waitFor(`${run} applying version ${version}`, async () => {
    const report = await getRun(server.client, run, { points: 0 });
    const change = report.changes.find((c) => c.version === version);
    return change?.status === 'applied' ? { report, change } : undefined;
  });
}

function controlVersion(runId: string): number {
  const handle = RunFileHandle.open(join(runsDir, `${runId}.tgrun`));
  try {
    return handle.readControl()?.version ?? -1;
  } finally {
    handle.close();
  }
}

before(async () => {
  server = await startTrainingServer(work, runsDir, auditLog);
});

after(async () => {
  for (const t of trainers) t.child.kill('SIGKILL');
  await server.close();
});

describe('training runs over MCP', () => {
  it('applies a new lr between optimizer steps, and param_groups holds it from that step on', async () => {
    const t = trainer(['--name', 'lr-change', '--steps', '2000']);
    const run = await t.runId;
    const listed = await call(server.client, 'list_runs', {});
    assert.ok(
      (listed.structured.runs as { id: string }[]).some((r) => r.id === run),
      listed.text,
    );
    const before = await atStep(run, 10);

    const answer = await call(server.client, 'set_hyperparameters', { run, values: { lr: 0.01 }, reason: 'test' });
    assert.equal(answer.isError, false, answer.text);
    assert.equal(answer.structured.status, 'pending');
    assert.equal(answer.structured.version, 1);
    assert.deepEqual(answer.structured.values, { lr: { old: 0.05, new: 0.01 } });
    assert.ok((answer.structured.apply_at_step as number) > before.step - 1);

    const { report, change } = await applied(run, 1);
    const at = change.applied_step as number;
    assert.ok(at >= (change.apply_at_step as number));
    assert.equal(report.hyperparameters.find((h) => h.name === 'lr')?.current, 0.01);
    const records = t.records();
    for (const r of records) assert.equal(r.lr, r.step < at ? 0.05 : 0.01, `lr at step ${r.step}`);
    assert.ok(records.some((r) => r.step >= at));

    // A later step asked for explicitly: applied exactly there.
    const target = report.step + 25;
    const second = await call(server.client, 'set_hyperparameters', {
      run,
      values: { momentum: 0.5, accum: 4, label_smoothing: true },
      apply_at_step: target,
    });
    assert.equal(second.structured.apply_at_step, target, second.text);
    const { change: c2, report: r2 } = await applied(run, 2);
    assert.equal(c2.applied_step, target);
    const byStep = new Map(t.records().map((r) => [r.step, r]));
    assert.equal(byStep.get(target - 1)?.momentum, 0.9);
    assert.equal(byStep.get(target)?.momentum, 0.5);
    assert.deepEqual(byStep.get(target)?.hparams, { lr: 0.01, momentum: 0.5, label_smoothing: true, accum: 4 });
    assert.equal(r2.hyperparameters.find((h) => h.name === 'accum')?.current, 4);

    // Metrics flow back: the loss curve, downsampled, and the CSV resource.
    const withSeries = await getRun(server.client, run, { points: 10, plot: true });
    assert.ok(withSeries.metrics.loss && withSeries.metrics.loss.count > 10);
    assert.ok((withSeries.series.loss?.length ?? 0) <= 10);
    const plot = await server.client.callTool({ name: 'get_run', arguments: { run, plot: true, points: 0 } });
    const image = (plot.content as { type: string; mimeType?: string; data?: string }[]).find(
      (c) => c.type === 'image',
    );
    assert.equal(image?.mimeType, 'image/png');
    assert.equal(
      Buffer.from(image?.data ?? '', 'base64')
        .subarray(1, 4)
        .toString(),
      'PNG',
    );
    const csv = await server.client.readResource({ uri: `run://${run}/metrics` });
    const text = (csv.contents[0] as { text: string }).text;
    assert.match(text.split('\n')[0] as string, /^step,loss,grad_norm$/);
    assert.ok(text.split('\n').length > 10);
    t.child.kill('SIGTERM');
  });

  it('rejects bad changes with a reason and writes nothing to the control block', async () => {
    const t = trainer(['--name', 'bad-input', '--steps', '2000']);
    const run = await t.runId;
    await atStep(run, 2);
    const version = controlVersion(run);
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ run: 'no-such-run', values: { lr: 0.1 } }, 'RUN_NOT_FOUND', /list_runs/],
      [{ run, values: { learning_rate: 0.1 } }, 'UNKNOWN_HYPERPARAMETER', /declares lr, momentum/],
      [{ run, values: { lr: '0.1' } }, 'INVALID_HYPERPARAMETER', /takes a number/],
      [{ run, values: { lr: 'NaN' } }, 'INVALID_HYPERPARAMETER', /takes a number/],
      [{ run, values: { lr: null } }, 'INVALID_HYPERPARAMETER', /got null/],
      [{ run, values: { lr: 5 } }, 'INVALID_HYPERPARAMETER', /range 0.000001..1/],
      [{ run, values: { accum: 2.5 } }, 'INVALID_HYPERPARAMETER', /integer/],
      [{ run, values: { label_smoothing: 1 } }, 'INVALID_HYPERPARAMETER', /true or false/],
      [{ run, values: { lr: 0.1, momentum: 7 } }, 'INVALID_HYPERPARAMETER', /momentum/],
      [{ run, values: {} }, 'INVALID_HYPERPARAMETER', /at least one/],
    ];
    for (const [args, code, why] of cases) {
      const result = await call(server.client, 'set_hyperparameters', args);
      assert.equal(result.isError, true, JSON.stringify(args));
      assert.ok(result.text.startsWith(`${code}:`), result.text);
      assert.match(result.text, why);
    }
    const missing = await call(server.client, 'control_run', { run, command: 'checkpoint' });
    assert.match(missing.text, /^BAD_PARAMETER: .*on_checkpoint/);
    assert.equal(controlVersion(run), version, 'nothing was written');
    const report = await getRun(server.client, run, { points: 0 });
    assert.equal(report.hyperparameters.find((h) => h.name === 'lr')?.current, 0.05);
    assert.equal(report.changes.length, 0);

    // A run whose process is gone takes no commands.
    t.child.kill('SIGKILL');
    await t.exited;
    await waitFor('state exited', async () =>
      (await getRun(server.client, run, { points: 0 })).state === 'exited' ? true : undefined,
    );
    const late = await call(server.client, 'set_hyperparameters', { run, values: { lr: 0.1 } });
    assert.match(late.text, /^RUN_EXITED: /);
    const late2 = await call(server.client, 'control_run', { run, command: 'pause' });
    assert.match(late2.text, /^RUN_EXITED: /);
  });

  it('pauses, resumes, checkpoints and stops with a checkpoint', async () => {
    const t = trainer(['--name', 'pausing', '--steps', '5000', '--checkpoint-dir', work]);
    const run = await t.runId;
    await atStep(run, 5);
    const pause = await call(server.client, 'control_run', { run, command: 'pause', reason: 'look closer' });
    assert.equal(pause.isError, false, pause.text);
    const paused = await waitFor('paused', async () => {
      const r = await getRun(server.client, run, { points: 0 });
      return r.state === 'paused' ? r : undefined;
    });
    const stepsThen = t.records().length;
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(t.records().length, stepsThen, 'no step while paused');
    assert.equal((await getRun(server.client, run, { points: 0 })).step, paused.step);

    const checkpoint = await call(server.client, 'control_run', { run, command: 'checkpoint' });
    assert.equal(checkpoint.isError, false, checkpoint.text);
    const withCheckpoint = await waitFor('checkpoint while paused', async () => {
      const r = await getRun(server.client, run, { points: 0 });
      return r.last_checkpoint ? r : undefined;
    });
    assert.equal(withCheckpoint.last_checkpoint?.step, paused.step);
    assert.ok(existsSync(withCheckpoint.last_checkpoint?.path as string));

    await call(server.client, 'control_run', { run, command: 'resume' });
    await atStep(run, paused.step + 5);
    assert.ok(t.records().length > stepsThen);

    const stop = await call(server.client, 'control_run', { run, command: 'stop' });
    assert.equal(stop.structured.checkpoint, true, 'stop checkpoints by default when the run can');
    const { code, lines } = await t.exited;
    assert.equal(code, 0);
    const done = lines.find((l) => 'done' in l) as { done: number; stopped: boolean };
    assert.equal(done.stopped, true);
    assert.ok(done.done < 4999);
    const final = await waitFor('finished', async () => {
      const r = await getRun(server.client, run, { points: 0 });
      return r.state === 'finished' ? r : undefined;
    });
    assert.equal(final.last_checkpoint?.step, done.done);
    assert.ok(existsSync(join(work, `ckpt-${done.done}-rank0.pt`)));
    const late = await call(server.client, 'control_run', { run, command: 'resume' });
    assert.match(late.text, /^RUN_EXITED: /);
  });

  it('keeps several runs apart', async () => {
    const ts = [0, 1, 2].map((i) => trainer(['--name', `many-${i}`, '--steps', '3000']));
    const ids = await Promise.all(ts.map((t) => t.runId));
    await Promise.all(ids.map((id) => atStep(id, 3)));
    const listed = (await call(server.client, 'list_runs', {})).structured.runs as { id: string; state: string }[];
    for (const id of ids) assert.equal(listed.find((r) => r.id === id)?.state, 'running');
    const lrs = [0.001, 0.002, 0.003];
    await Promise.all(ids.map((run, i) => call(server.client, 'set_hyperparameters', { run, values: { lr: lrs[i] } })));
    for (const [i, run] of ids.entries()) {
      const { change } = await applied(run, 1);
      // The trainer writes its record for a step just after applying the change at that step.
      const last = await waitFor(`${run} recording step ${change.applied_step}`, async () => {
        const record = ts[i]?.records().at(-1);
        return record && record.step >= (change.applied_step as number) ? record : undefined;
      });
      assert.equal(last.lr, lrs[i]);
    }
    for (const t of ts) t.child.kill('SIGTERM');
  });

  it('two ranks of a torch.distributed (gloo) job apply a change at the same step', { timeout: 120_000 }, async () => {
    const port = String(await freePort());
    const env = (rank: number) => ({
      RANK: String(rank),
      WORLD_SIZE: '2',
      MASTER_ADDR: '127.0.0.1',
      MASTER_PORT: port,
    });
    const ranks = [0, 1].map((rank) =>
      trainer(['--name', 'ddp', '--ddp', '--steps', '3000', '--sync-every', '5'], env(rank), `rank${rank}`),
    );
    const [id0, id1] = await Promise.all(ranks.map((r) => r.runId));
    assert.equal(id0, id1, 'both ranks attach to the one run file');
    const run = id0 as string;
    await atStep(run, 10);
    const answer = await call(server.client, 'set_hyperparameters', { run, values: { lr: 0.02 } });
    assert.equal(answer.isError, false, answer.text);
    // A change counts as applied once rank 0 has applied it; each rank then reports its own version.
    const { change } = await applied(run, 1);
    const at = change.applied_step as number;
    await waitFor('both ranks past the change', async () =>
      ranks.every((r) => (r.records().at(-1)?.step ?? -1) > at) ? true : undefined,
    );
    for (const r of ranks) {
      const byStep = new Map(r.records().map((x) => [x.step, x.lr]));
      assert.equal(byStep.get(at - 1), 0.05);
      assert.equal(byStep.get(at), 0.02);
    }
    await waitFor('every rank reporting version 1', async () => {
      const report = await getRun(server.client, run, { points: 0 });
      return report.ranks?.every((r) => r.applied_version === 1) ? true : undefined;
    });
    const stop = await call(server.client, 'control_run', { run, command: 'stop' });
    assert.equal(stop.isError, false, stop.text);
    const exits = await Promise.all(ranks.map((r) => r.exited));
    const dones = exits.map((e) => (e.lines.find((l) => 'done' in l) as { done: number }).done);
    assert.equal(dones[0], dones[1], 'both ranks stop at the same step');
    for (const [rank, e] of exits.entries())
      assert.equal(e.code, 0, `rank ${rank} exited with ${e.code ?? e.signal}: ${e.stderr.slice(-2000)}`);
  });

  it('lists unreadable files in the runs directory and keeps serving', async () => {
    const old = new Date(Date.now() - 60_000);
    writeFileSync(join(runsDir, 'garbage.tgrun'), Buffer.alloc(4096, 7));
    const t = trainer(['--name', 'to-truncate', '--steps', '5']);
    const run = await t.runId;
    await t.exited;
    const whole = readFileSync(join(runsDir, `${run}.tgrun`));
    writeFileSync(join(runsDir, 'truncated.tgrun'), whole.subarray(0, 30_000));
    const { utimesSync } = await import('node:fs');
    utimesSync(join(runsDir, 'garbage.tgrun'), old, old);
    utimesSync(join(runsDir, 'truncated.tgrun'), old, old);
    const listed = await call(server.client, 'list_runs', {});
    assert.equal(listed.isError, false);
    const unreadable = listed.structured.unreadable as { file: string; error: string }[];
    assert.match(unreadable.find((u) => u.file === 'garbage.tgrun')?.error ?? '', /no tensorgate run header/);
    assert.match(unreadable.find((u) => u.file === 'truncated.tgrun')?.error ?? '', /truncated/);
    const missing = await call(server.client, 'get_run', { run: 'garbage' });
    assert.match(missing.text, /^RUN_NOT_FOUND/);
    assert.equal((await getRun(server.client, run, { points: 0 })).state, 'finished');
  });

  it('writes every request and every application to the audit log', () => {
    const entries = readFileSync(auditLog, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const sets = entries.filter((e) => e.action === 'set_hyperparameters');
    const first = sets[0] as Record<string, unknown>;
    assert.equal(first.actor, 'mcp:tensorgate-tests');
    assert.deepEqual(first.values, { lr: { old: 0.05, new: 0.01 } });
    assert.equal(first.reason, 'test');
    assert.equal(typeof first.requested_step, 'number');
    assert.match(String(first.time), /^\d{4}-\d\d-\d\dT/);
    const appliedEntries = entries.filter((e) => e.action === 'applied');
    assert.ok(appliedEntries.some((e) => e.target === first.target && typeof e.applied_step === 'number'));
    const controls = entries.filter((e) => e.action === 'control_run').map((e) => e.command);
    for (const c of ['pause', 'checkpoint', 'resume', 'stop']) assert.ok(controls.includes(c), c);
    // Rejected requests change nothing and are not logged as changes.
    assert.ok(!entries.some((e) => JSON.stringify(e.values ?? {}).includes('learning_rate')));
  });
});

describe('the trainer without a gateway', () => {
  it('trains on when the server is killed, and a new server finds the run', async (ctx) => {
    const dirs = trainingWorkDir();
    const first = await startTrainingServer(dirs.work, dirs.runsDir, dirs.auditLog);
    // Killed below; if the test fails before that, it must not outlive the test and hold the file.
    const killFirst = () => {
      if (first.transport.pid) {
        try {
          process.kill(first.transport.pid, 'SIGKILL');
        } catch {
          // Gone already.
        }
      }
    };
    ctx.after(killFirst);
    const t = startTrainer(dirs.runsDir, dirs.work, ['--name', 'orphan', '--steps', '150', '--step-sleep', '0.01']);
    trainers.push(t);
    const run = await t.runId;
    await waitFor('a step', async () => (t.records().length > 5 ? true : undefined));
    const answer = await call(first.client, 'set_hyperparameters', { run, values: { lr: 0.2 } });
    assert.equal(answer.isError, false, answer.text);
    killFirst();
    const { code } = await t.exited;
    assert.equal(code, 0, 'the trainer finished every step');
    const records = t.records();
    assert.equal(records.length, 150);
    assert.equal(records.at(-1)?.lr, 0.2);
    await first.close().catch(() => {});

    const second = await startTrainingServer(dirs.work, dirs.runsDir, dirs.auditLog);
    try {
      const report = await getRun(second.client, run, { points: 5 });
      assert.equal(report.state, 'finished');
      assert.equal(report.step, 149);
      assert.equal(report.metrics.loss?.count, 150);
      assert.equal(report.hyperparameters.find((h) => h.name === 'lr')?.current, 0.2);
    } finally {
      await second.close();
    }
  });
});
