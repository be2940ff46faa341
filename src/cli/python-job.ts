import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { joinPythonPath, PYTHON_PACKAGE_DIR, pythonExecutable } from '../engines/torch/worker-process.js';
import { type ErrorCode, isErrorCode, tgError } from '../errors.js';

/**
 * The CLI's errands to PyTorch (export, introspection): `python -m tensorgate.<module> JOB.json`
 * on the interpreter the workers run, in a scratch folder the job may write to. The module prints
 * one JSON line last: `{"ok": true, ...}` or `{"ok": false, "code", "message"}`, turned here into a
 * TensorgateError with that code, its message after `what`.
 */

export interface JobResult {
  ok: boolean;
  code?: string;
  message?: string;
}

export async function runPythonJob<T extends JobResult>(
  module: string,
  job: (work: string) => Record<string, unknown>,
  what: string,
  fallback: ErrorCode,
): Promise<{ result: T; work: string; cleanup: () => void }> {
  const work = mkdtempSync(join(tmpdir(), 'tensorgate-job-'));
  const cleanup = () => rmSync(work, { recursive: true, force: true });
  try {
    writeFileSync(join(work, 'job.json'), JSON.stringify(job(work)));
    let stdout: string;
    try {
      ({ stdout } = await promisify(execFile)(
        pythonExecutable(),
        ['-m', `tensorgate.${module}`, join(work, 'job.json')],
        {
          env: { ...process.env, PYTHONPATH: joinPythonPath(PYTHON_PACKAGE_DIR) },
          // torch's compilers may print a lot before the last line, the JSON one.
          maxBuffer: 64 << 20,
        },
      ));
    } catch (err) {
      throw tgError(fallback, `${what}: python -m tensorgate.${module} failed: ${whyItFailed(err)}`);
    }
    const result = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as T;
    if (!result.ok) {
      const code: ErrorCode = result.code && isErrorCode(result.code) ? result.code : fallback;
      throw tgError(code, `${what}: ${result.message}`);
    }
    return { result, work, cleanup };
  } catch (err) {
    cleanup();
    throw err;
  }
}

/** The last line the job printed on stderr; else how it ended (a signal, a full stdout buffer). */
function whyItFailed(err: unknown): string {
  const e = err as { stderr?: unknown; signal?: string | null; message?: string };
  const lastLine = String(e.stderr ?? '')
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .at(-1);
  if (lastLine) return lastLine;
  if (e.signal) return `it was killed by ${e.signal}`;
  return e.message ?? String(err);
}
