import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { type Connected, connect } from '../helpers/mcp.js';
import { ensureTestModels, ROOT } from '../helpers/models.js';

/**
 * Workflows on the real server: real torch workers, the official MCP client over Streamable
 * HTTP. The repository holds four fixture models and the workflows of test/fixtures/workflows
 * (YAML and JSON), plus one that cannot compile.
 */

interface Stage {
  stage: string;
  status: string;
  started_ms?: number;
  ended_ms?: number;
  timings?: Record<string, number>;
}
interface Output {
  name: string;
  value?: unknown;
  from?: string;
  uri?: string;
  summary?: { values?: unknown };
}
interface Run {
  request_id: string;
  workflow: string;
  outputs: Output[];
  stages: Stage[];
  branches: { condition: string; taken: boolean | null }[];
  timings: { decode_ms: number; run_ms: number; encode_ms: number; total_ms: number };
}

let server: Connected;
let repo: string;

function fixtureRepository(): string {
  const models = ensureTestModels();
  const dir = mkdtempSync(join(tmpdir(), 'tensorgate-workflows-'));
  for (const m of ['adder', 'flaky', 'multi_out', 'sleepy']) symlinkSync(join(models, m), join(dir, m));
  cpSync(join(ROOT, 'test/fixtures/workflows'), dir, { recursive: true });
  // Reads a tensor no stage produces: listed as invalid, the others still serve.
  mkdirSync(join(dir, 'broken'));
  writeFileSync(
    join(dir, 'broken', 'workflow.json'),
    JSON.stringify({
      name: 'broken',
      inputs: [{ name: 'x', dtype: 'float32', shape: [-1, 4] }],
      steps: [{ stage: 's', model: 'multi_out', inputs: { x: 'nowhere.y' } }],
      outputs: { y: 's.scores' },
    }),
  );
  return dir;
}

before(async () => {
  process.env.TENSORGATE_SLEEPY_SECONDS = '0.2';
  repo = fixtureRepository();
  server = await connect('http', undefined, [], repo);
});

after(async () => {
  await server?.close();
});

async function call<T>(name: string, args: Record<string, unknown>): Promise<T> {
  const result = await server.client.callTool({ name, arguments: args });
  if (result.isError) throw new Error((result.content as { text: string }[])[0]?.text);
  return result.structuredContent as T;
}

async function callError(
  name: string,
  args: Record<string, unknown>,
): Promise<{ text: string; data: Record<string, unknown> }> {
  const result = await server.client.callTool({ name, arguments: args });
  assert.equal(result.isError, true, `${name} should fail`);
  const meta = result._meta?.['tensorgate/error'] as { data: Record<string, unknown> };
  return { text: (result.content as { text: string }[])[0]?.text as string, data: meta.data };
}

const runTriage = (x: number[][]) => call<Run>('run_workflow', { workflow: 'triage', inputs: { x } });
const stage = (run: Run, name: string) => run.stages.find((s) => s.stage === name) as Stage;
const output = (run: Run, name: string) => run.outputs.find((o) => o.name === name) as Output;

describe('list_workflows', () => {
  it('lists each workflow with its inputs, outputs, stages and the conditions they run under', async () => {
    const { workflows } = await call<{
      workflows: {
        name: string;
        state: string;
        error?: string;
        stages: { stage: string; when?: string }[];
        models: string[];
      }[];
    }>('list_workflows', {});
    assert.deepEqual(
      workflows.map((w) => [w.name, w.state]),
      [
        ['broken', 'invalid'],
        ['nested', 'ready'],
        ['softmax_sum', 'ready'],
        ['triage', 'ready'],
      ],
    );
    const triage = workflows.find((w) => w.name === 'triage');
    assert.deepEqual(triage?.models.sort(), ['adder', 'flaky', 'multi_out', 'sleepy']);
    assert.equal(triage?.stages.find((s) => s.stage === 'plus')?.when, 'max(s.scores) > 0.5');
    assert.match(workflows[0]?.error as string, /stage "s", inputs\.x: no stage "nowhere"/);
  });
});

describe('run_workflow', () => {
  it('takes the then branch on a confident score: the fan-out runs at once, the fan-in adds its outputs', async () => {
    const run = await runTriage([[0, 0, 0, 10]]);
    assert.deepEqual(run.branches, [{ condition: 'max(s.scores) > 0.5', taken: true }]);
    assert.deepEqual(
      run.stages.map((s) => [s.stage, s.status]),
      [
        ['s', 'ok'],
        ['f', 'ok'],
        ['slow', 'ok'],
        ['plus', 'ok'],
      ],
    );
    // total = flaky(x) + sleepy(x) = (x + 1) + 2x
    assert.deepEqual(output(run, 'total').summary?.values, [[1, 1, 1, 31]]);
    assert.equal(output(run, 'total').from, 'plus.sum');
    assert.match(output(run, 'total').uri as string, /^tensor:\/\//);

    // s and f ran while slow (200 ms) was running: they overlap it, they did not wait for it.
    const [s, f, slow, plus] = [stage(run, 's'), stage(run, 'f'), stage(run, 'slow'), stage(run, 'plus')];
    for (const quick of [s, f]) {
      assert.ok((quick.started_ms as number) < (slow.ended_ms as number), `${quick.stage} started before slow ended`);
      assert.ok((slow.started_ms as number) < (quick.ended_ms as number), `${quick.stage} ended after slow started`);
    }
    assert.ok((slow.ended_ms as number) - (slow.started_ms as number) >= 190, 'slow slept');
    assert.ok((plus.started_ms as number) >= (slow.ended_ms as number), 'plus waited for its inputs');
    assert.ok(run.timings.run_ms < 2 * 200 + 150, `the stages overlapped: ${run.timings.run_ms} ms`);
    assert.ok(typeof plus.timings?.compute_ms === 'number');
  });

  it('takes the else branch on an uncertain score: the literal output, the branch stage skipped', async () => {
    const run = await runTriage([[1, 1, 1, 1]]);
    assert.deepEqual(run.branches, [{ condition: 'max(s.scores) > 0.5', taken: false }]);
    assert.equal(stage(run, 'plus').status, 'skipped');
    assert.equal(stage(run, 'plus').started_ms, undefined);
    assert.deepEqual(output(run, 'total'), { name: 'total', value: 'uncertain' });
    assert.deepEqual(output(run, 'scores').summary?.values, [[0.25, 0.25, 0.25, 0.25]]);
  });

  it('gives the same result as calling the stages one by one', async () => {
    const x = [[0.5, 0.25, 2, 4]];
    const flow = await runTriage(x);
    const infer = (model: string, inputs: Record<string, unknown>) =>
      call<{ outputs: { name: string; uri: string; summary: unknown }[] }>('infer', { model, inputs });
    const s = await infer('multi_out', { x });
    const f = await infer('flaky', { x });
    const slow = await infer('sleepy', { x });
    const plus = await infer('adder', { a: f.outputs[0]?.uri, b: slow.outputs[0]?.uri });
    assert.deepEqual(output(flow, 'total').summary, plus.outputs[0]?.summary);
    assert.deepEqual(output(flow, 'scores').summary, s.outputs.find((o) => o.name === 'scores')?.summary);
  });

  it('fails with the failing stage named, its code kept, and the partial timings', async () => {
    const { text, data } = await callError('run_workflow', { workflow: 'triage', inputs: { x: [[-1, 0, 0, 10]] } });
    assert.match(text, /^INFERENCE_FAILED: workflow "triage", stage "f" \(model flaky\): .*negative input/);
    assert.equal(data.stage, 'f');
    const stages = data.stages as Stage[];
    assert.equal(stages.find((s) => s.stage === 'f')?.status, 'failed');
    assert.equal(stages.find((s) => s.stage === 's')?.status, 'ok');
    assert.ok(typeof stages.find((s) => s.stage === 's')?.ended_ms === 'number');
    // slow was running when f failed: withdrawn; plus never started.
    assert.equal(stages.find((s) => s.stage === 'plus')?.status, 'not_run');
    // The server keeps serving.
    assert.equal((await runTriage([[1, 1, 1, 1]])).outputs.length, 2);
  });

  it('runs a workflow that calls another workflow, on both sides of its branch', async () => {
    // argmax 0: the branch's then is empty, y is the inner workflow's sum.
    const first = await call<Run>('run_workflow', { workflow: 'nested', inputs: { x: [[9, 0, 0, 0]] } });
    assert.deepEqual(
      first.branches.map((b) => b.taken),
      [true],
    );
    assert.equal(output(first, 'y').from, 'inner.sum');
    assert.equal(stage(first, 'inner').status, 'ok');
    assert.equal(stage(first, 'f').status, 'skipped');
    // argmax 3: flaky runs on the inner sum, y = sum + 1.
    const second = await call<Run>('run_workflow', { workflow: 'nested', inputs: { x: [[0, 0, 0, 9]] } });
    assert.deepEqual(
      second.branches.map((b) => b.taken),
      [false],
    );
    assert.equal(output(second, 'y').from, 'f.y');
    const values = (output(second, 'y').summary?.values as number[][] | undefined)?.[0] ?? [];
    assert.ok(Math.abs((values[3] as number) - (9 + 1 + 1)) < 1e-3, `y = x + softmax(x) + 1: ${values}`);
  });

  it('takes every input form infer takes: a tensor:// handle from an earlier call', async () => {
    const scored = await call<{ outputs: { name: string; uri: string }[] }>('infer', {
      model: 'sleepy',
      inputs: { x: [[0, 0, 0, 5]] },
    });
    const run = await call<Run>('run_workflow', { workflow: 'triage', inputs: { x: scored.outputs[0]?.uri } });
    assert.deepEqual(output(run, 'total').summary?.values, [[1, 1, 1, 31]]);
  });

  it('answers bad requests with stable codes and keeps serving', async () => {
    assert.match((await callError('run_workflow', { workflow: 'nope', inputs: {} })).text, /^WORKFLOW_NOT_FOUND/);
    assert.match(
      (await callError('run_workflow', { workflow: 'broken', inputs: { x: [[1, 1, 1, 1]] } })).text,
      /^INVALID_WORKFLOW: workflow "broken", stage "s", inputs\.x: no stage "nowhere"/,
    );
    assert.match((await callError('run_workflow', { workflow: 'triage', inputs: {} })).text, /^MISSING_INPUT/);
    assert.match(
      (await callError('run_workflow', { workflow: 'triage', inputs: { x: [[1, 2, 3]] } })).text,
      /^SHAPE_MISMATCH/,
    );
    assert.match(
      (
        await callError('run_workflow', {
          workflow: 'triage',
          inputs: { x: [[1, 1, 1, 1]] },
          parameters: { precision: 'fp16' },
        })
      ).text,
      /^BAD_PARAMETER: unknown parameter "precision"/,
    );
    const timedOut = await callError('run_workflow', {
      workflow: 'triage',
      inputs: { x: [[0, 0, 0, 10]] },
      parameters: { timeout_ms: 50 },
    });
    assert.match(timedOut.text, /^TIMEOUT: workflow "triage" did not finish within 50 ms \("slow" still running\)/);
    assert.equal((await runTriage([[1, 1, 1, 1]])).outputs.length, 2);
  });
});

describe('tensorgate register DIR (workflow)', () => {
  const run = promisify(execFile);
  const cli = (args: string[]) =>
    run(process.execPath, [
      join(ROOT, 'bin/tensorgate.js'),
      '--models',
      repo,
      '--registry',
      join(repo, 'cli.db'),
      ...args,
    ]);

  it('records a workflow that compiles and refuses one that does not, naming the stage and field', async () => {
    await cli(['register', join(repo, 'adder')]);
    await cli(['register', join(repo, 'multi_out')]);
    await cli(['register', join(repo, 'flaky')]);
    const { stdout } = await cli(['register', join(repo, 'softmax_sum')]);
    assert.match(stdout, /^workflow softmax_sum: ready \(2 stages; models multi_out, adder\)/);
    const nested = await cli(['register', join(repo, 'nested')]);
    assert.match(nested.stdout, /^workflow nested: ready/, 'a workflow calling one registered earlier');

    await assert.rejects(cli(['register', join(repo, 'triage')]), (err: { stderr: string; code: number }) => {
      assert.equal(err.code, 1);
      assert.match(
        err.stderr,
        /INVALID_WORKFLOW: workflow "triage", stage "slow", model: no model "sleepy" is registered/,
      );
      return true;
    });
  });
});
