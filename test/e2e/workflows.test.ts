import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { encodePng } from '../../src/tensor/png.js';
import { type Connected, connect } from '../helpers/mcp.js';
import { ensureTestModels, ROOT, visionPipelineRepository } from '../helpers/models.js';

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
  for (const w of ['triage', 'softmax_sum', 'nested'])
    cpSync(join(ROOT, 'test/fixtures/workflows', w), join(dir, w), { recursive: true });
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
  server = await connect('http', undefined, ['--grpc', '0'], repo);
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
    const failed = stages.find((s) => s.stage === 'f');
    assert.equal(failed?.status, 'failed');
    assert.ok(typeof failed?.started_ms === 'number' && typeof failed.ended_ms === 'number', JSON.stringify(failed));
    // s started with f: finished, or withdrawn when f failed first (the two race); done ones keep their timings.
    const scored = stages.find((s) => s.stage === 's');
    assert.ok(scored?.status === 'ok' || scored?.status === 'cancelled', JSON.stringify(scored));
    if (scored?.status === 'ok') assert.ok(typeof scored.ended_ms === 'number');
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

describe('workflows over OIP v2, like ensembles', () => {
  const base = () => (server.url as string).replace(/\/mcp$/, '');
  const inferBody = (x: number[][], outputs?: string[]) =>
    JSON.stringify({
      inputs: [{ name: 'x', shape: [1, 4], datatype: 'FP32', data: x.flat() }],
      ...(outputs ? { outputs: outputs.map((name) => ({ name })) } : {}),
    });
  interface OipResponse {
    model_name: string;
    outputs: { name: string; datatype: string; shape: number[]; data: number[] }[];
    parameters: Record<string, string | number>;
    error?: string;
  }
  const infer = async (workflow: string, body: string) => {
    const res = await fetch(`${base()}/v2/models/${workflow}/infer`, { method: 'POST', body });
    return { status: res.status, json: (await res.json()) as OipResponse };
  };

  it('describes a workflow with platform "ensemble" and says when it is ready', async () => {
    const meta = (await (await fetch(`${base()}/v2/models/triage`)).json()) as Record<string, unknown>;
    assert.deepEqual(meta, {
      name: 'triage',
      versions: ['1'],
      platform: 'ensemble',
      inputs: [{ name: 'x', datatype: 'FP32', shape: [-1, 4] }],
      outputs: [
        { name: 'total', datatype: 'FP32', shape: [-1, -1] },
        { name: 'scores', datatype: 'FP32', shape: [-1, 4] },
      ],
    });
    assert.equal((await fetch(`${base()}/v2/models/triage/ready`)).status, 200);
    assert.equal((await fetch(`${base()}/v2/models/broken/ready`)).status, 400);
    assert.equal((await fetch(`${base()}/v2/models/triage/versions/2`)).status, 404);
  });

  it('runs it: tensors as outputs, a literal and the stage records as parameters', async () => {
    const confident = await infer('triage', inferBody([[0, 0, 0, 10]]));
    assert.equal(confident.status, 200);
    assert.equal(confident.json.model_name, 'triage');
    assert.deepEqual(confident.json.outputs.find((o) => o.name === 'total')?.data, [1, 1, 1, 31]);
    const stages = JSON.parse(confident.json.parameters.stages as string) as Stage[];
    assert.deepEqual(
      stages.map((s) => s.status),
      ['ok', 'ok', 'ok', 'ok'],
    );
    assert.equal(confident.json.parameters.literal_outputs, undefined);

    const uncertain = await infer('triage', inferBody([[1, 1, 1, 1]], ['total', 'scores']));
    assert.equal(uncertain.status, 200);
    assert.deepEqual(
      uncertain.json.outputs.map((o) => o.name),
      ['scores'],
    );
    assert.deepEqual(JSON.parse(uncertain.json.parameters.literal_outputs as string), { total: 'uncertain' });

    const failing = await infer('triage', inferBody([[-1, 0, 0, 10]]));
    assert.equal(failing.status, 500);
    assert.match(failing.json.error as string, /^INFERENCE_FAILED: workflow "triage", stage "f"/);
    assert.equal((await infer('triage', inferBody([[1, 1, 1, 1]], ['nope']))).status, 400);
  });

  it("answers Triton's own HTTP and gRPC clients, and lists workflows in the repository index", async () => {
    const python = join(ROOT, '.tensorgate', 'pyclients', 'bin', 'python');
    assert.ok(existsSync(python), 'tritonclient is missing: run bash scripts/install-python-clients.sh');
    const grpcAddress = /OIP v2 gRPC at ([\d.]+:\d+)/.exec(server.serverLog())?.[1] as string;
    const { stdout } = await promisify(execFile)(
      python,
      [join(ROOT, 'test/fixtures/triton_workflow_client.py'), base().replace('http://', ''), grpcAddress],
      { timeout: 120_000 },
    );
    const report = JSON.parse(stdout);
    assert.equal(report.metadata.platform, 'ensemble');
    assert.equal(report.ready, true);
    assert.equal(report.grpc_ready, true);
    const index = report.index as { name: string; state: string }[];
    assert.deepEqual(
      index.filter((e) => ['triage', 'broken'].includes(e.name)).map((e) => [e.name, e.state]),
      [
        ['broken', 'UNAVAILABLE'],
        ['triage', 'READY'],
      ],
    );
    for (const adapter of ['http', 'grpc']) {
      const confident = report[`${adapter}_confident`];
      assert.deepEqual(confident.total, [[1, 1, 1, 31]], adapter);
      assert.ok(Math.abs(confident.scores[0][3] - 1) < 1e-3, adapter);
      const uncertain = report[`${adapter}_uncertain`];
      assert.equal(uncertain.total, null, `${adapter}: the literal is not a tensor`);
      const literal = uncertain.parameters.literal_outputs;
      assert.deepEqual(JSON.parse(typeof literal === 'string' ? literal : literal.string_param), {
        total: 'uncertain',
      });
    }
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

describe('the demo vision pipeline: image files in, a tool of its own', () => {
  let vision: Connected;
  let files: { object: string; empty: string; small: string; text: string };
  const pixels = (object: boolean, size = 224) => {
    // A dark RGB image, with a bright square over rows 64-127 and columns 96-159 (of 224) when `object`.
    const data = Buffer.alloc(size * size * 3, 20);
    const at = (v: number) => Math.round((v * size) / 224);
    if (object)
      for (let y = at(64); y < at(128); y++) data.fill(240, (y * size + at(96)) * 3, (y * size + at(160)) * 3);
    return data;
  };

  before(async () => {
    vision = await connect('http', undefined, [], visionPipelineRepository(mkdtempSync(join(tmpdir(), 'tg-vision-'))));
    files = {
      object: join(vision.workDir, 'object.png'),
      empty: join(vision.workDir, 'empty.png'),
      // Half the size: the pipeline's first model resizes it to 224x224 before anything else.
      small: join(vision.workDir, 'small.png'),
      text: join(vision.workDir, 'notes.png'),
    };
    writeFileSync(files.object, encodePng(pixels(true), 224, 224, 3));
    writeFileSync(files.empty, encodePng(pixels(false), 224, 224, 3));
    writeFileSync(files.small, encodePng(pixels(true, 112), 112, 112, 3));
    writeFileSync(files.text, 'not an image at all');
  });

  after(async () => {
    await vision?.close();
  });

  const runVision = async (object: boolean) => {
    const result = await vision.client.callTool({
      name: 'run_workflow',
      arguments: { workflow: 'vision-pipeline', inputs: { image: object ? files.object : files.empty } },
    });
    assert.ok(!result.isError, JSON.stringify(result.content));
    return result.structuredContent as Run;
  };

  it('classifies and fuses only when the detector finds an object', async () => {
    const found = await runVision(true);
    assert.deepEqual(
      found.branches.map((b) => b.taken),
      [true],
    );
    assert.deepEqual(
      found.stages.map((s) => [s.stage, s.status]),
      [
        ['prep', 'ok'],
        ['detect', 'ok'],
        ['classify', 'ok'],
        ['fuse', 'ok'],
      ],
    );
    assert.deepEqual(output(found, 'objects').summary?.values, [4], 'the square covers four grid cells');
    const classes = output(found, 'classes') as Output & { summary: { top?: { top: { label: string }[] }[] } };
    assert.equal(classes.from, 'fuse.classes');
    const top = classes.summary.top?.[0]?.top ?? [];
    assert.equal(top.length, 5, 'top-5 with the CIFAR-10 labels of the fusion model');
    assert.ok(
      top.every((t) =>
        ['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck'].includes(t.label),
      ),
    );

    const empty = await runVision(false);
    assert.deepEqual(
      empty.branches.map((b) => b.taken),
      [false],
    );
    assert.equal(stage(empty, 'classify').status, 'skipped');
    assert.deepEqual(output(empty, 'classes').value, { status: 'no_objects' });
    assert.equal(output(empty, 'objects').value, 0);
    assert.equal(output(empty, 'boxes').from, 'detect.boxes');
  });

  it('has a tool of its own whose schema takes an image file, and answers like run_workflow', async () => {
    const { tools } = await vision.client.listTools();
    const tool = tools.find((t) => t.name === 'vision-pipeline');
    assert.ok(tool, `tools: ${tools.map((t) => t.name).join(', ')}`);
    assert.deepEqual(Object.keys(tool.inputSchema.properties ?? {}), ['image']);
    const image = (tool.inputSchema.properties as Record<string, { description?: string }>).image;
    assert.match(image?.description ?? '', /^the photo to look at: an absolute path or file:\/\/ URL of a PNG, JPEG/);
    assert.match(tool.description ?? '', /Runs 4 stages server-side/);
    assert.equal(tool.annotations?.readOnlyHint, true);

    // A picture half the size is resized by the first stage's processing: the same square found.
    for (const image of [files.small, `data:image/png;base64,${readFileSync(files.object).toString('base64')}`]) {
      const result = await vision.client.callTool({ name: 'vision-pipeline', arguments: { image } });
      assert.ok(!result.isError, JSON.stringify(result.content));
      const run = result.structuredContent as Run;
      assert.deepEqual(
        run.stages.map((s) => [s.stage, s.status]),
        [
          ['prep', 'ok'],
          ['detect', 'ok'],
          ['classify', 'ok'],
          ['fuse', 'ok'],
        ],
      );
      assert.deepEqual(output(run, 'objects').summary?.values, [4]);
      assert.ok((stage(run, 'prep').timings?.preprocess_ms ?? -1) >= 0, "the image was decoded in prep's worker");
    }
  });

  it('refuses what is not an image with its code, naming the input, and serves on', async () => {
    const bad = await vision.client.callTool({ name: 'vision-pipeline', arguments: { image: files.text } });
    assert.equal(bad.isError, true);
    const text = (bad.content as { text: string }[])[0]?.text ?? '';
    assert.match(text, /^BAD_IMAGE: input "image": .*not a PNG, JPEG, WebP, GIF or BMP image/);
    const unknown = await vision.client.callTool({
      name: 'run_workflow',
      arguments: { workflow: 'vision-pipeline', inputs: { photo: files.object } },
    });
    assert.match(
      (unknown.content as { text: string }[])[0]?.text ?? '',
      /^UNKNOWN_INPUT: input "photo" is not declared by workflow vision-pipeline; it takes "image" \(image\)/,
    );
    const tensor = await vision.client.callTool({
      name: 'run_workflow',
      arguments: {
        workflow: 'vision-pipeline',
        inputs: { image: { b64: pixels(true).toString('base64'), shape: [1, 224, 224, 3] } },
      },
    });
    assert.match((tensor.content as { text: string }[])[0]?.text ?? '', /^BAD_IMAGE: input "image"/);
    assert.equal((await runVision(true)).stages.length, 4);
  });

  it('takes the image as a BYTES input over OIP v2: the path as a JSON string, or the file in a binary body', async () => {
    const base = new URL(vision.url as string).origin;
    const metadata = (await (await fetch(`${base}/v2/models/vision-pipeline`)).json()) as { inputs: unknown[] };
    assert.deepEqual(metadata.inputs, [{ name: 'image', datatype: 'BYTES', shape: [-1] }]);
    const objects = (body: { outputs: { name: string; data: number[] }[] }) =>
      body.outputs.find((o) => o.name === 'objects')?.data;
    const json = await fetch(`${base}/v2/models/vision-pipeline/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ inputs: [{ name: 'image', datatype: 'BYTES', shape: [1], data: [files.object] }] }),
    });
    assert.equal(json.status, 200, await json.clone().text());
    assert.deepEqual(objects(await json.json()), [4]);
    // The binary extension: a JSON header, then the element (a 4-byte length and the file's bytes).
    const png = readFileSync(files.small);
    const element = Buffer.concat([Buffer.from(new Uint32Array([png.byteLength]).buffer), png]);
    const header = Buffer.from(
      JSON.stringify({
        inputs: [
          { name: 'image', datatype: 'BYTES', shape: [1], parameters: { binary_data_size: element.byteLength } },
        ],
        outputs: [{ name: 'objects', parameters: { binary_data: false } }],
      }),
    );
    const binary = await fetch(`${base}/v2/models/vision-pipeline/infer`, {
      method: 'POST',
      headers: {
        'content-type': 'application/octet-stream',
        'inference-header-content-length': String(header.byteLength),
      },
      body: Buffer.concat([header, element]),
    });
    assert.equal(binary.status, 200, await binary.clone().text());
    assert.deepEqual(objects(await binary.json()), [4]);
  });

  it('runs over many images as a batch job, one workflow run per item, a bad file recorded with its code', async () => {
    const results = join(vision.workDir, 'vision.jsonl');
    const items = [files.object, files.empty, files.text, files.small, files.object];
    const result = await vision.client.callTool({
      name: 'start_job',
      arguments: { workflow: 'vision-pipeline', items: { files: items }, results, wait: true },
    });
    assert.ok(!result.isError, JSON.stringify(result.content));
    const job = result.structuredContent as { state: string; workflow?: string; done: number; errors: object };
    assert.equal(job.state, 'completed');
    assert.equal(job.workflow, 'vision-pipeline');
    assert.equal(job.done, items.length);
    assert.deepEqual(job.errors, { BAD_IMAGE: 1 });
    const lines = readFileSync(results, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { index: number; item: string; outputs?: Record<string, unknown>; error?: object });
    assert.deepEqual(
      lines.map((l) => [l.index, l.item]),
      items.map((item, i) => [i, item]),
    );
    assert.deepEqual(lines[0]?.outputs?.objects, [4], 'the square covers four grid cells');
    assert.equal((lines[0]?.outputs?.classes as number[] | undefined)?.length, 10, "the fusion model's ten scores");
    assert.equal(lines[1]?.outputs?.objects, 0);
    assert.deepEqual(
      lines[1]?.outputs?.classes,
      { status: 'no_objects' },
      'the branch not taken, as run_workflow says',
    );
    assert.match(JSON.stringify(lines[2]?.error), /"code":"BAD_IMAGE"/);
    assert.deepEqual(lines[3]?.outputs?.objects, [4]);

    const refused = async (args: Record<string, unknown>, pattern: RegExp) => {
      const answer = await vision.client.callTool({
        name: 'start_job',
        arguments: { items: { files: items }, results: join(vision.workDir, 'refused.jsonl'), ...args },
      });
      assert.equal(answer.isError, true);
      assert.match((answer.content as { text: string }[])[0]?.text ?? '', pattern);
    };
    await refused({ workflow: 'nope' }, /^WORKFLOW_NOT_FOUND: /);
    await refused({ workflow: 'vision-pipeline', model: 'image-classifier' }, /^BAD_PARAMETER: .*give one of the two/);
    await refused({ workflow: 'vision-pipeline', version: '1' }, /^BAD_PARAMETER: "version" picks a model's version/);

    // From a shell: `job start NAME --workflow --wait` prints progress on stderr, then the summary.
    const fromCli = join(vision.workDir, 'vision-cli.jsonl');
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      [
        join(ROOT, 'bin/tensorgate.js'),
        'job',
        'start',
        'vision-pipeline',
        '--workflow',
        '--files',
        ...items,
        '--results',
        fromCli,
        '--wait',
        '--url',
        vision.url as string,
      ],
      { cwd: ROOT },
    );
    assert.match(stdout, /^job \S+ \(workflow vision-pipeline\): completed, 5\/5 items, 1 failed \(BAD_IMAGE 1\)/);
    assert.match(stderr, /^job \S+ \(workflow vision-pipeline\): running, 5\/5 items/m, 'the last progress line');
    assert.equal(readFileSync(fromCli, 'utf8').trim().split('\n').length, items.length);
  });

  it('lists the image input in list_workflows by kind', async () => {
    const listed = await vision.client.callTool({ name: 'list_workflows', arguments: {} });
    const workflows = (listed.structuredContent as { workflows: { name: string; inputs: unknown[] }[] }).workflows;
    assert.deepEqual(workflows.find((w) => w.name === 'vision-pipeline')?.inputs, [
      { name: 'image', type: 'image', description: 'the photo to look at' },
    ]);
  });
});
