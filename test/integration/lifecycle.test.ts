import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway.js';
import { openGateway } from '../helpers/gateway.js';
import { ensureTestModels } from '../helpers/models.js';

/** Model lifecycle with real workers: on-demand loading, load/unload, and the memory budget. */

describe('model lifecycle', { timeout: 300_000 }, () => {
  let gateway: Gateway;
  let models: string;
  let work: string;
  const x = [[1, 2, 3, 4]];

  function variant(fixture: string, name: string, edit: (c: Record<string, unknown>) => void = () => {}): string {
    const dir = join(work, name);
    cpSync(join(models, fixture), dir, { recursive: true });
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
    Object.assign(config, { name });
    edit(config);
    writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
    return dir;
  }
  const state = (name: string) => gateway.modelInfo(name).versions[0]?.state;
  const memory = (mb: number) => (c: Record<string, unknown>) => {
    c.resources = { ...(c.resources as object), memory_mb: mb };
  };

  before(async () => {
    models = ensureTestModels();
    work = mkdtempSync(join(tmpdir(), 'tg-life2-'));
    gateway = await openGateway(work, { memoryBudgetMb: 1000 });
  });

  after(async () => {
    await gateway.close();
  });

  it('registers an on_demand model unloaded and loads it for its first request, which waits', async () => {
    const info = await gateway.register(
      variant('flaky', 'lazy', (c) => {
        Object.assign(c, { load: 'on_demand' });
        memory(256)(c);
      }),
    );
    assert.equal(info.versions[0]?.state, 'unloaded');
    const result = await gateway.infer({ model: 'lazy', inputs: { x } });
    assert.deepEqual(result.outputs[0]?.shape, [1, 4]);
    assert.equal(state('lazy'), 'ready');
  });

  it('unloads and loads again on request', async () => {
    const unloaded = await gateway.unloadModel('lazy');
    assert.equal(unloaded.versions[0]?.state, 'unloaded');
    const loaded = await gateway.loadModel('lazy');
    assert.equal(loaded.versions[0]?.state, 'ready');
    await assert.rejects(gateway.loadModel('lazy', '7'), { code: 'VERSION_NOT_FOUND' });
    await assert.rejects(gateway.unloadModel('nope'), { code: 'MODEL_NOT_FOUND' });
  });

  it('unloads the least recently used idle model to stay within the memory budget', async () => {
    // Budget 1000 MB: lazy (256) + a (400) fit; b (400) needs room.
    await gateway.register(variant('flaky', 'a', memory(400)));
    await gateway.infer({ model: 'lazy', inputs: { x } }); // lazy is now used more recently than a
    await gateway.register(variant('flaky', 'b', memory(400)));
    assert.equal(state('b'), 'ready');
    assert.match(String(state('a')), /^(unloading|unloaded)$/, 'a was least recently used');
    assert.equal(state('lazy'), 'ready');
    // a comes back on demand, pushing out whichever idle model was used least recently (lazy).
    await gateway.infer({ model: 'a', inputs: { x } });
    assert.equal(state('a'), 'ready');
    assert.match(String(state('lazy')), /^(unloading|unloaded)$/);
  });

  it('refuses a model that can never fit, or that would need a busy model unloaded', async () => {
    // register records the model; its load fails, and the version stays unloaded.
    await gateway.register(variant('flaky', 'huge', memory(2000)));
    assert.equal(state('huge'), 'unloaded');
    await assert.rejects(gateway.infer({ model: 'huge', inputs: { x } }), {
      code: 'MEMORY_BUDGET_EXCEEDED',
      message: /needs 2000 MB, more than the whole 1000 MB/,
    });
    // Two busy models of 450 MB each: c (400) cannot make room while they work.
    await gateway.register(variant('sleepy', 'slow-a', memory(450)));
    await gateway.register(variant('sleepy', 'slow-b', memory(450)));
    const busy = ['slow-a', 'slow-b'].flatMap((model) =>
      Array.from({ length: 4 }, () => gateway.infer({ model, inputs: { x } })),
    );
    await new Promise((r) => setTimeout(r, 100));
    await gateway.register(variant('flaky', 'c', memory(400)));
    assert.equal(state('c'), 'unloaded');
    await assert.rejects(gateway.infer({ model: 'c', inputs: { x } }), {
      code: 'MEMORY_BUDGET_EXCEEDED',
      message: /no idle model can be unloaded/,
    });
    await Promise.all(busy);
  });
});

describe('registering a model again', { timeout: 120_000 }, () => {
  it('lets the requests its old workers hold finish, and serves the new registration after', async () => {
    const work = mkdtempSync(join(tmpdir(), 'tg-rereg-'));
    const gateway = await openGateway(work);
    try {
      const dir = join(work, 'sleepy');
      cpSync(join(ensureTestModels(), 'sleepy'), dir, { recursive: true });
      await gateway.register(dir);
      // One request computing (0.5 s) and three queued behind it when the model is registered again.
      const held = Array.from({ length: 4 }, () => gateway.infer({ model: 'sleepy', inputs: { x: [[1, 2, 3, 4]] } }));
      await new Promise((r) => setTimeout(r, 100));
      const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
      writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, description: 'registered again' }));
      const info = await gateway.register(dir);
      assert.equal(info.versions[0]?.state, 'ready');
      for (const result of await Promise.all(held)) assert.deepEqual(result.outputs[0]?.shape, [1, 4]);
      assert.equal(gateway.modelInfo('sleepy').description, 'registered again');
    } finally {
      await gateway.close();
    }
  });
});
