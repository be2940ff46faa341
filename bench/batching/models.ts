import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BatchingSettings, ModelKey, VariantInfo } from './results.js';

/**
 * The model folders the benchmark registers: the demo models built by scripts/make_demo_models.py,
 * and per setting a copy with a `batching` section and its own name, so that the unbatched model
 * and every batched setting are separate pools in one gateway. Only version 1 is kept (the image
 * model's eager version 2 would load a second worker for nothing).
 */

export const SOURCE_MODEL: Record<ModelKey, string> = { tabular: 'tabular-classifier', image: 'image-classifier' };

export interface Variant extends VariantInfo {
  dir: string;
}

/** Builds the demo models into `dir` unless they are there already. */
export function buildDemoModels(root: string, python: string, dir: string): void {
  if (Object.values(SOURCE_MODEL).every((name) => existsSync(join(dir, name, 'config.json')))) return;
  execFileSync(python, [join(root, 'scripts', 'make_demo_models.py'), dir], { stdio: ['ignore', 'ignore', 'inherit'] });
}

export function variantId(b: BatchingSettings | null): string {
  if (!b) return 'off';
  const preferred = b.preferred_batch_sizes?.length ? `-p${b.preferred_batch_sizes.join('.')}` : '';
  return `b${b.max_batch_size}-d${b.max_queue_delay_us}${preferred}`;
}

/** `64:1000` or `8:4000:4.8` = max_batch_size:max_queue_delay_us[:preferred sizes joined by "."]. */
export function parseSettings(spec: string): BatchingSettings[] {
  return spec
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const [max, delay, preferred] = s.split(':');
      const out: BatchingSettings = { max_batch_size: Number(max), max_queue_delay_us: Number(delay ?? 0) };
      if (preferred) out.preferred_batch_sizes = preferred.split('.').map(Number);
      if (!Number.isInteger(out.max_batch_size) || !Number.isInteger(out.max_queue_delay_us)) {
        throw new Error(`bad batching setting "${s}": expected max_batch_size:max_queue_delay_us[:p1.p2]`);
      }
      return out;
    });
}

/**
 * Copies the demo model `key` from `sourceDir` to `outDir/<id>` with version 1 only, renamed and
 * with `batching` set (or left out for the unbatched baseline).
 */
export function makeVariant(
  key: ModelKey,
  sourceDir: string,
  outDir: string,
  batching: BatchingSettings | null,
): Variant {
  const id = variantId(batching);
  const source = join(sourceDir, SOURCE_MODEL[key]);
  const dir = join(outDir, `${SOURCE_MODEL[key]}.${id}`);
  rmSync(dir, { recursive: true, force: true });
  cpSync(join(source, 'config.json'), join(dir, 'config.json'));
  cpSync(join(source, '1'), join(dir, '1'), { recursive: true });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown> & {
    versions: Record<string, unknown>;
  };
  const name = batching ? `${SOURCE_MODEL[key]}.${id}` : SOURCE_MODEL[key];
  config.name = name;
  config.default_version = '1';
  config.versions = { '1': config.versions['1'] };
  if (batching) config.batching = batching;
  else delete config.batching;
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  return { model: key, id, registered_as: name, batching, dir };
}

/** Threads and instances as the copied config declares them (the same for every variant). */
export function resourcesOf(dir: string): { threads: number; instances: number } {
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as {
    resources?: { threads?: number; instances?: number };
  };
  return { threads: config.resources?.threads ?? 1, instances: config.resources?.instances ?? 1 };
}
