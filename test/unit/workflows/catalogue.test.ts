import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { TensorgateError } from '../../../src/errors.js';
import { Registry } from '../../../src/registry/registry.js';
import { WorkflowCatalogue } from '../../../src/workflows/catalogue.js';

/** Workflow folders on disk, the registry in SQLite: registration, call order, recursion, persistence. */

const spec = { name: 'x', dtype: 'float32' as const, shape: [-1, 4] };
const ident = { inputs: [spec], outputs: [{ ...spec, name: 'y' }], models: ['ident'], workflows: [] };

function repository(workflows: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'tensorgate-catalogue-'));
  for (const [name, callee] of Object.entries(workflows)) {
    mkdirSync(join(root, name));
    const step = callee.startsWith('model:')
      ? { stage: 's', model: callee.slice(6), inputs: { x: 'x' } }
      : { stage: 's', workflow: callee, inputs: { x: 'x' } };
    writeFileSync(
      join(root, name, 'workflow.json'),
      JSON.stringify({ name, inputs: [spec], steps: [step], outputs: { y: 's.y' } }),
    );
  }
  return root;
}

const catalogue = (registry: Registry, logged: string[] = []) =>
  new WorkflowCatalogue(
    registry,
    (n) => (n === 'ident' ? ident : undefined),
    (m) => logged.push(m),
  );

describe('workflow catalogue', () => {
  it('compiles callees first, whatever the folder order, and keeps the set across restarts', async () => {
    const root = repository({ a_outer: 'b_middle', b_middle: 'c_inner', c_inner: 'model:ident' });
    const registry = await Registry.open(join(root, 'registry.db'));
    const first = catalogue(registry);
    await first.loadAll(root);
    assert.deepEqual(
      first.list().map((w) => [w.name, w.state, w.models]),
      [
        ['a_outer', 'ready', ['ident']],
        ['b_middle', 'ready', ['ident']],
        ['c_inner', 'ready', ['ident']],
      ],
    );
    assert.deepEqual(first.plan('a_outer').workflows.sort(), ['a_outer', 'b_middle', 'c_inner']);
    // A new process over the same registry, with no repository scan: the same workflows.
    const second = catalogue(registry);
    await second.loadAll();
    assert.deepEqual(second.names(), ['a_outer', 'b_middle', 'c_inner']);
    await registry.close();
  });

  it('lists recursive workflows and their callers as invalid, with the cycle', async () => {
    const root = repository({
      loop_a: 'loop_b',
      loop_b: 'loop_a',
      caller: 'loop_a',
      self: 'self',
      fine: 'model:ident',
    });
    const logged: string[] = [];
    const workflows = catalogue(await Registry.open(':memory:'), logged);
    await workflows.loadAll(root);
    const state = Object.fromEntries(workflows.list().map((w) => [w.name, w.error ?? w.state]));
    assert.equal(state.fine, 'ready');
    assert.match(state.loop_a as string, /workflow "loop_a" calls itself: loop_a -> loop_b -> loop_a/);
    assert.match(state.self as string, /workflow "self" calls itself: self -> self/);
    assert.match(
      state.caller as string,
      /^workflow "caller" calls workflow "loop_a", which is invalid: workflow "loop_a" calls itself/,
    );
    assert.ok(logged.some((m) => m.startsWith('workflow "loop_b" is invalid')));
    assert.throws(
      () => workflows.plan('self'),
      (err: TensorgateError) => err.code === 'INVALID_WORKFLOW',
    );
    assert.throws(
      () => workflows.plan('missing'),
      (err: TensorgateError) => err.code === 'WORKFLOW_NOT_FOUND' && /there are caller, fine/.test(err.message),
    );
  });

  it('refuses a folder that does not compile and keeps the previous definition', async () => {
    const root = repository({ one: 'model:ident' });
    const registry = await Registry.open(':memory:');
    const workflows = catalogue(registry);
    await workflows.loadAll(root);
    writeFileSync(
      join(root, 'one', 'workflow.json'),
      JSON.stringify({
        name: 'one',
        inputs: [spec],
        steps: [{ stage: 's', model: 'gone', inputs: { x: 'x' } }],
        outputs: { y: 's.y' },
      }),
    );
    await assert.rejects(
      () => workflows.register(join(root, 'one')),
      (err: TensorgateError) => /stage "s", model: no model "gone"/.test(err.message),
    );
    assert.equal(workflows.info('one').state, 'ready');
    assert.equal(workflows.plan('one').stages[0]?.target, 'ident');
  });

  it('reads YAML too, and names the file that does not parse', async () => {
    const root = mkdtempSync(join(tmpdir(), 'tensorgate-catalogue-'));
    mkdirSync(join(root, 'y'));
    writeFileSync(
      join(root, 'y', 'workflow.yaml'),
      'name: y\ninputs: [{name: x, dtype: float32, shape: [-1, 4]}]\nsteps:\n  - {stage: s, model: ident, inputs: {x: x}}\noutputs: {y: s.y}\n',
    );
    mkdirSync(join(root, 'z'));
    writeFileSync(join(root, 'z', 'workflow.yml'), 'name: [unclosed\n');
    const workflows = catalogue(await Registry.open(':memory:'));
    assert.equal((await workflows.register(join(root, 'y'))).state, 'ready');
    await assert.rejects(
      () => workflows.register(join(root, 'z')),
      (err: TensorgateError) => err.code === 'INVALID_WORKFLOW' && /workflow\.yml does not parse/.test(err.message),
    );
  });
});
