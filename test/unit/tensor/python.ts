/** Real numpy / torch from the interpreter workers run (the project venv), for interop tests; each probe runs once, on first use. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pythonExecutable } from '../../../src/engines/torch/worker-process.js';

export const PYTHON = pythonExecutable();

function probe(module: string): string | undefined {
  const r = spawnSync(PYTHON, ['-c', `import ${module}`], { encoding: 'utf8' });
  if (r.error) return `${PYTHON} is missing (${r.error.message})`;
  if (r.status !== 0) return `${module} is not installed for ${PYTHON}`;
  return undefined;
}

/** Why numpy tests are skipped, or false when numpy is there. */
export function numpySkip(): string | false {
  const why = probe('numpy');
  return why === undefined
    ? false
    : `skipped: ${why}; run scripts/setup.sh (the project venv has numpy) to run the numpy interop tests`;
}

/** Why torch tests are skipped, or false when torch is there. */
export function torchSkip(): string | false {
  const why = probe('torch');
  return why === undefined
    ? false
    : `skipped: ${why}; run scripts/setup.sh (the project venv has torch) to cross-check bfloat16 with torch`;
}

/** Why tests against the reference safetensors package are skipped, or false when it is importable. */
export function safetensorsSkip(): string | false {
  const why = probe('safetensors.numpy');
  return why === undefined ? false : `skipped: ${why}; pip install safetensors (and numpy) to check against it`;
}

/** Runs a Python snippet with `cwd` as working directory; returns its stdout; fails the test on error. */
export function runPython(code: string, cwd: string): string {
  const r = spawnSync(PYTHON, ['-c', code], { cwd, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  assert.equal(r.status, 0, `python failed:\n${r.stderr}`);
  return r.stdout;
}

export function withTempDir<T>(fn: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'tg-tensor-'));
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
