import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';
import { encodeNpy } from '../../src/tensor/npy.js';
import { buildDemoModels, makeVariant } from '../batching/models.js';

/** The demo tabular model as it ships, and the copy of it whose worker spins. */
export const MODEL = 'tabular-classifier';
export const SPIN_MODEL = 'tabular-spin';

/** The one row every fixed-cost call sends. */
export const INPUT = new Float32Array([5.1, 3.5, 1.4, 0.2]);

/**
 * The model repository of the fixed-cost benchmarks in `work/models`: the tabular model (version 1)
 * as it ships, and a copy of it named SPIN_MODEL with `resources.spin_us`; and `work/row.npy`, the
 * input as a file. `plainDir` is the shipped model's folder (what the raw baseline loads).
 */
export function fixedCostModels(
  root: string,
  work: string,
  spinUs: number,
): { repo: string; plainDir: string; npy: string } {
  const demo = join(root, 'models');
  buildDemoModels(root, pythonExecutable(), demo);
  const repo = join(work, 'models');
  const plain = makeVariant('tabular', demo, repo, null);
  const dir = join(repo, SPIN_MODEL);
  cpSync(plain.dir, dir, { recursive: true });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as {
    name: string;
    resources: Record<string, unknown>;
  };
  config.name = SPIN_MODEL;
  config.resources.spin_us = spinUs;
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  const npy = join(work, 'row.npy');
  writeFileSync(npy, encodeNpy({ dtype: 'float32', shape: [1, 4], data: new Uint8Array(INPUT.buffer) }));
  return { repo, plainDir: plain.dir, npy };
}
