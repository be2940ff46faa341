import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TensorgateError } from '../../../src/errors.js';
import {
  type CallableSpec,
  compileWorkflow,
  parseWorkflowDefinition,
  type Resolver,
} from '../../../src/workflows/definition.js';

/** Compilation against declared specs (no models run here): every mistake named by stage and field. */

const f32 = (name: string, shape = [-1, 4]) => ({ name, dtype: 'float32' as const, shape });
const model = (inputs: ReturnType<typeof f32>[], outputs: ReturnType<typeof f32>[]): CallableSpec => ({
  inputs,
  outputs,
  models: [],
  workflows: [],
  versions: ['1', '2'],
});
const MODELS: Record<string, CallableSpec> = {
  ident: model([f32('x')], [f32('y')]),
  pair: model([f32('a', [-1, -1]), f32('b', [-1, -1])], [f32('sum', [-1, -1])]),
  label: model([f32('x')], [{ name: 'id', dtype: 'int64', shape: [-1] } as unknown as ReturnType<typeof f32>]),
  image: model([f32('pixels', [-1, 3, 8, 8])], [f32('logits', [-1, 10])]),
};
for (const [name, spec] of Object.entries(MODELS)) spec.models = [name];
const resolver: Resolver = { model: (n) => MODELS[n], workflow: () => undefined };

const base = {
  name: 'w',
  inputs: [f32('x')],
  steps: [{ stage: 'a', model: 'ident', inputs: { x: 'x' } }] as unknown[],
  outputs: { y: 'a.y' } as Record<string, unknown>,
};
const compile = (patch: Partial<typeof base>) =>
  compileWorkflow(parseWorkflowDefinition({ ...base, ...patch }, 'test'), resolver);
/** That compiling the patched definition fails with INVALID_WORKFLOW and this message. */
const refusedBy = (compiler: typeof compile) => (patch: Partial<typeof base>, message: RegExp) =>
  assert.throws(
    () => compiler(patch),
    (err: TensorgateError) => {
      assert.equal(err.code, 'INVALID_WORKFLOW');
      assert.match(err.message, message);
      return true;
    },
  );
const refused = refusedBy(compile);

describe('workflow compilation', () => {
  it('plans data dependencies, branch guards and output alternatives', () => {
    const plan = compile({
      steps: [
        { stage: 'a', model: 'ident', inputs: { x: 'x' } },
        { stage: 'l', model: 'label', inputs: { x: 'x' } },
        {
          if: 'l.id == 3',
          then: [{ stage: 'b', model: 'pair', inputs: { a: 'a.y', b: 'x' } }],
          else: [{ stage: 'c', model: 'ident', inputs: { x: 'a.y' } }],
        },
      ],
      outputs: { out: ['b.sum', 'c.y'], fallback: ['b.sum', { value: { status: 'no_objects' } }] },
    });
    assert.deepEqual(
      plan.stages.map((s) => [s.name, s.after, s.guards]),
      [
        ['a', [], []],
        ['l', [], []],
        ['b', ['a', 'l'], [{ branch: 0, taken: true }]],
        ['c', ['a', 'l'], [{ branch: 0, taken: false }]],
      ],
    );
    assert.deepEqual(plan.branches[0]?.after, ['l']);
    assert.deepEqual(plan.models.sort(), ['ident', 'label', 'pair']);
    assert.deepEqual(plan.outputs[1]?.alternatives[1], { value: { status: 'no_objects' } });
  });

  it('refuses unknown models, workflows, versions, stages, outputs and inputs', () => {
    refused(
      { steps: [{ stage: 'a', model: 'nope', inputs: { x: 'x' } }] },
      /stage "a", model: no model "nope" is registered/,
    );
    refused(
      { steps: [{ stage: 'a', workflow: 'nope', inputs: { x: 'x' } }] },
      /stage "a", workflow: no workflow "nope" is registered/,
    );
    refused(
      { steps: [{ stage: 'a', model: 'ident', version: '7', inputs: { x: 'x' } }] },
      /stage "a", version: model "ident" has no version 7 \(it has 1, 2\)/,
    );
    refused({ steps: [{ stage: 'a', model: 'ident', inputs: { x: 'b.y' } }] }, /stage "a", inputs\.x: no stage "b"/);
    refused(
      {
        steps: [
          { stage: 'a', model: 'ident', inputs: { x: 'a2.z' } },
          { stage: 'a2', model: 'ident', inputs: { x: 'x' } },
        ],
      },
      /stage "a", inputs\.x: stage "a2" has no output "z" \(it has y\)/,
    );
    refused(
      { steps: [{ stage: 'a', model: 'ident', inputs: { x: 'image' } }] },
      /stage "a", inputs\.x: "image" is not a workflow input/,
    );
    refused(
      { steps: [{ stage: 'a', model: 'ident', inputs: {} }] },
      /stage "a", inputs: model "ident" needs input "x"/,
    );
    refused(
      { steps: [{ stage: 'a', model: 'ident', inputs: { x: 'x', extra: 'x' } }] },
      /stage "a", inputs\.extra: model "ident" has no input "extra" \(it takes x\)/,
    );
    refused({ outputs: { y: 'a.nope' } }, /outputs, "a\.nope": stage "a" has no output "nope"/);
  });

  it('refuses an input whose dtype or shape cannot match the model', () => {
    refused(
      {
        steps: [
          { stage: 'l', model: 'label', inputs: { x: 'x' } },
          { stage: 'a', model: 'ident', inputs: { x: 'l.id' } },
        ],
      },
      /stage "a", inputs\.x: "l\.id" is int64; ident takes float32/,
    );
    refused(
      { steps: [{ stage: 'a', model: 'image', inputs: { pixels: 'x' } }], outputs: { y: 'a.logits' } },
      /stage "a", inputs\.pixels: "x" has shape \[-1,4\]; image takes \[-1,3,8,8\]/,
    );
  });

  it('refuses cycles, duplicate names and stages named like inputs', () => {
    refused(
      {
        steps: [
          { stage: 'a', model: 'ident', inputs: { x: 'b.y' } },
          { stage: 'b', model: 'ident', inputs: { x: 'a.y' } },
        ],
      },
      /stage "a": its inputs form a cycle: a -> b -> a/,
    );
    refused(
      { steps: [{ stage: 'a', model: 'ident', inputs: { x: 'a.y' } }] },
      /stage "a": its inputs form a cycle: a -> a/,
    );
    refused(
      {
        steps: [
          { stage: 'a', model: 'ident', inputs: { x: 'x' } },
          { stage: 'a', model: 'ident', inputs: { x: 'x' } },
        ],
      },
      /stage "a": another stage has this name/,
    );
    refused(
      { steps: [{ stage: 'x', model: 'ident', inputs: { x: 'x' } }], outputs: { y: 'x' } },
      /stage "x": a workflow input has this name/,
    );
  });

  it('refuses conditions that do not parse or read what may not exist', () => {
    refused(
      {
        steps: [
          { stage: 'a', model: 'ident', inputs: { x: 'x' } },
          { if: 'max(a.y > 1', then: [] },
        ],
      },
      /steps\[1\]\.if: condition "max\(a\.y > 1": expected "\)" but found the end/,
    );
    refused(
      {
        steps: [
          { stage: 'a', model: 'ident', inputs: { x: 'x' } },
          { if: 'max(b.y) > 1', then: [] },
        ],
      },
      /branch 0 \("max\(b\.y\) > 1"\): no stage "b"/,
    );
    // c runs only when the first branch is taken; the second condition runs either way.
    refused(
      {
        steps: [
          { stage: 'a', model: 'ident', inputs: { x: 'x' } },
          { if: 'max(a.y) > 1', then: [{ stage: 'c', model: 'ident', inputs: { x: 'x' } }] },
          { if: 'max(c.y) > 1', then: [] },
        ],
      },
      /branch 1 \("max\(c\.y\) > 1"\): "c\.y" is not produced on every path that reaches here/,
    );
  });

  it('refuses a stage reading a tensor only another branch produces', () => {
    refused(
      {
        steps: [
          { stage: 'a', model: 'ident', inputs: { x: 'x' } },
          {
            if: 'max(a.y) > 1',
            then: [{ stage: 't', model: 'ident', inputs: { x: 'x' } }],
            else: [{ stage: 'e', model: 'ident', inputs: { x: 't.y' } }],
          },
        ],
      },
      /stage "e", inputs\.x: "t\.y" is not produced on every path that reaches here/,
    );
  });

  it('refuses an output that some path never produces, naming the path', () => {
    refused(
      {
        steps: [
          { stage: 'a', model: 'ident', inputs: { x: 'x' } },
          { if: 'max(a.y) > 1', then: [{ stage: 't', model: 'ident', inputs: { x: 'x' } }] },
        ],
        outputs: { y: 't.y' },
      },
      /outputs\.y: not produced when "max\(a\.y\) > 1" false; add an alternative/,
    );
    // Alternatives covering both sides, or a literal, are fine.
    compile({
      steps: [
        { stage: 'a', model: 'ident', inputs: { x: 'x' } },
        {
          if: 'max(a.y) > 1',
          then: [{ stage: 't', model: 'ident', inputs: { x: 'x' } }],
          else: [{ stage: 'e', model: 'ident', inputs: { x: 'x' } }],
        },
      ],
      outputs: { y: ['t.y', 'e.y'], z: ['t.y', { value: null }] },
    });
  });

  it('refuses more branches than it can check every path of', () => {
    const steps: unknown[] = [{ stage: 'a', model: 'ident', inputs: { x: 'x' } }];
    for (let i = 0; i < 17; i++) steps.push({ if: `max(a.y) > ${i}`, then: [] });
    refused({ steps }, /17 branches; at most 16 are allowed/);
  });

  it('refuses malformed definitions with every schema problem in one message', () => {
    assert.throws(
      () =>
        parseWorkflowDefinition(
          {
            name: 'Bad Name',
            inputs: [],
            steps: [
              { stage: 'a', model: 'ident', workflow: 'w', inputs: { x: 'x' } },
              { stage: 'b-c', model: 'm', inputs: {} },
            ],
            outputs: {},
            extra: 1,
          },
          'bad.json',
        ),
      (err: TensorgateError) => {
        assert.equal(err.code, 'INVALID_WORKFLOW');
        for (const part of [
          /^bad\.json is not a valid workflow/,
          /name: workflow names are lower-case/,
          /inputs: /,
          /steps\.0/,
          /steps\.1/,
        ])
          assert.match(err.message, part);
        return true;
      },
    );
  });
});

describe('workflow inputs taken as files or texts', () => {
  const photo = { type: 'image' as const, mode: 'RGB' as const, formats: ['png' as const], max_pixels: 100 };
  const files: Resolver = {
    model: (n) =>
      n === 'reader'
        ? {
            inputs: [],
            processed: { photo: photo as never },
            outputs: [f32('pixels', [-1, 3, 8, 8])],
            models: ['reader'],
            workflows: [],
          }
        : MODELS[n],
    workflow: () => undefined,
  };
  const image = { name: 'image', type: 'image' };
  const compileFiles = (patch: Partial<typeof base>) =>
    compileWorkflow(parseWorkflowDefinition({ ...base, inputs: [image] as never, ...patch }, 'test'), files);
  const refusedFiles = refusedBy(compileFiles);
  const read = { stage: 'r', model: 'reader', inputs: { photo: 'image' } };

  it('feed model stages whose processing takes their kind, and take that processing', () => {
    const plan = compileFiles({
      steps: [read, { stage: 'c', model: 'image', inputs: { pixels: 'r.pixels' } }],
      outputs: { logits: 'c.logits' },
    });
    assert.deepEqual(plan.inputs, []);
    assert.deepEqual(plan.processed, { image: photo });
  });

  it('are refused where a tensor is read, and a tensor where a file is', () => {
    refusedFiles(
      { steps: [read, { stage: 'a', model: 'ident', inputs: { x: 'image' } }], outputs: { y: 'a.y' } },
      /stage "a", inputs\.x: "image" is an image input, not a tensor: only a model stage whose processing takes image reads it/,
    );
    refusedFiles(
      {
        inputs: [image, f32('x')] as never,
        steps: [read, { stage: 'b', model: 'reader', inputs: { photo: 'x' } }],
        outputs: { p: 'b.pixels' },
      },
      /stage "b", inputs\.photo: reader takes image files as "photo": feed it a workflow input declared \{"name": \.\.\., "type": "image"\}, not "x"/,
    );
    refusedFiles(
      { inputs: [{ name: 'image', type: 'text' }] as never, steps: [read], outputs: { p: 'r.pixels' } },
      /not a text input/,
    );
    refusedFiles(
      { steps: [read], outputs: { p: 'image' } },
      /outputs, "image": "image" is an image input, not a tensor/,
    );
    refusedFiles(
      {
        steps: [read, { if: 'max(image) > 0', then: [{ stage: 'a', model: 'image', inputs: { pixels: 'r.pixels' } }] }],
        outputs: { p: 'r.pixels' },
      },
      /branch 0 \("max\(image\) > 0"\): "image" is an image input/,
    );
    refusedFiles(
      { inputs: [image, { name: 'other', type: 'image' }] as never, steps: [read], outputs: { p: 'r.pixels' } },
      /input "other": no model stage takes it/,
    );
    refusedFiles(
      { steps: [{ stage: 'r', model: 'reader', inputs: {} }], outputs: { p: 'r.pixels' } },
      /stage "r", inputs: model "reader" needs input "photo"/,
    );
  });
});
