import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pythonExecutable } from '../../src/engines/torch/worker-process.js';

/**
 * Test model repository: the demo models (all but the vision pipeline: see
 * visionPipelineRepository) plus small fixture models (sleepy, flaky, adder, ...), built once by
 * the project's own scripts into .tensorgate/test-models and reused by every test.
 */

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const PYTHON = pythonExecutable();
export const TEST_MODELS = process.env.TENSORGATE_TEST_MODELS ?? join(ROOT, '.tensorgate', 'test-models');

export function ensureTestModels(): string {
  if (
    !existsSync(join(TEST_MODELS, 'image-classifier', 'config.json')) ||
    !existsSync(join(TEST_MODELS, 'mlp_variants'))
  ) {
    mkdirSync(TEST_MODELS, { recursive: true });
    execFileSync(
      PYTHON,
      [
        join(ROOT, 'scripts/make_demo_models.py'),
        TEST_MODELS,
        ...['pipeline', 'digits', 'intents', 'dtmf'].flatMap((part) => ['--skip', part]),
      ],
      {
        stdio: 'inherit',
      },
    );
    execFileSync(PYTHON, [join(ROOT, 'scripts/make_test_models.py'), TEST_MODELS], { stdio: 'inherit' });
  }
  return TEST_MODELS;
}

/** Runs the model the plain PyTorch way (test/fixtures/reference_forward.py) and returns output .npy paths. */
export function referenceForward(model: string, version: string, inputs: string[], outPrefix: string): void {
  execFileSync(
    PYTHON,
    [join(ROOT, 'test/fixtures/reference_forward.py'), join(TEST_MODELS, model), version, outPrefix, ...inputs],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
}

/**
 * The demo digits model (an image-file classifier with processing) in a repository of its own,
 * built once: kept apart from the test models so that other tests' servers do not start it.
 */
export function ensureDigitsModels(): string {
  const dir = `${TEST_MODELS}-digits`;
  if (!existsSync(join(dir, 'digits', 'examples', 'labels.json'))) {
    mkdirSync(dir, { recursive: true });
    execFileSync(PYTHON, [join(ROOT, 'scripts/make_demo_models.py'), dir, '--only', 'digits'], { stdio: 'inherit' });
  }
  return dir;
}

/**
 * The demo text and audio models (intents: sentences through a tokenizer; dtmf: WAV recordings of
 * keypad tones) in a repository of their own, built once, like the digits model's.
 */
export function ensureTextAudioModels(): string {
  const dir = `${TEST_MODELS}-text-audio`;
  if (!existsSync(join(dir, 'dtmf', 'examples', 'labels.json')) || !existsSync(join(dir, 'intents', 'examples.json'))) {
    mkdirSync(dir, { recursive: true });
    execFileSync(PYTHON, [join(ROOT, 'scripts/make_demo_models.py'), dir, '--only', 'intents', '--only', 'dtmf'], {
      stdio: 'inherit',
    });
  }
  return dir;
}

/**
 * The demo vision pipeline (its three small models and the workflow) in a repository of its own
 * with a link to the test models' image-classifier; kept apart so that other tests' servers do not
 * start its workers.
 */
export function visionPipelineRepository(dir: string): string {
  execFileSync(PYTHON, [join(ROOT, 'scripts/make_demo_models.py'), dir, '--only', 'pipeline'], { stdio: 'ignore' });
  symlinkSync(join(ensureTestModels(), 'image-classifier'), join(dir, 'image-classifier'));
  return dir;
}

/**
 * An eager model in `work/name`, version 1: `model.py` with the given lines (its `build()` makes
 * the module), empty weights, and a config.json taking float32 `x` [-1, 4] to float32 `y` [-1, 4],
 * with `config`'s fields added (resources, batching, idempotent). Returns the folder.
 */
export function eagerModel(work: string, name: string, source: string[], config: Record<string, unknown> = {}): string {
  const dir = join(work, name);
  mkdirSync(join(dir, '1'), { recursive: true });
  writeFileSync(join(dir, '1', 'model.py'), source.join('\n'));
  execFileSync(PYTHON, ['-c', `import torch; torch.save({}, ${JSON.stringify(join(dir, '1', 'weights.pt'))})`]);
  writeFileSync(
    join(dir, 'config.json'),
    JSON.stringify({
      name,
      inputs: [{ name: 'x', dtype: 'float32', shape: [-1, 4] }],
      outputs: [{ name: 'y', dtype: 'float32', shape: [-1, 4] }],
      versions: { '1': { format: 'eager', entry: 'model:build', file: 'weights.pt' } },
      ...config,
    }),
  );
  return dir;
}
