import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { CommandShell } from '../../../src/metrics/command-shell.js';
import { waitFor } from '../../helpers/wait.js';

const dir = mkdtempSync(join(tmpdir(), 'tg-shell-'));

/** A script that prints its arguments one per line, as nvidia-smi prints its CSV. */
function script(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

/** Whether a process runs: not gone, and not a zombie waiting to be reaped. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

describe('CommandShell', () => {
  it('runs commands through one shell, one at a time, each answered with its own output', async () => {
    const echo = script('echo-args', 'for a in "$@"; do printf "%s\\n" "$a"; done');
    const shell = new CommandShell();
    try {
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, i) => shell.run([echo, `call ${i}`, '--query-gpu=index,name'])),
      );
      for (const [i, text] of answers.entries()) assert.equal(text, `call ${i}\n--query-gpu=index,name\n`);
      const pid = shell.pid;
      assert.ok(pid !== undefined);
      assert.equal(await shell.run([echo, 'again']), 'again\n');
      assert.equal(shell.pid, pid, 'the same shell: the gateway forked once');
      // Output without a final newline, and none at all, come back as they are.
      assert.equal(await shell.run(['printf', '%s', 'no newline']), 'no newline');
      assert.equal(await shell.run(['true']), '');
    } finally {
      shell.close();
    }
  });

  it('passes arguments literally: quotes, spaces and shell syntax are not interpreted', async () => {
    const echo = script('echo-literal', 'for a in "$@"; do printf "[%s]" "$a"; done');
    const marker = join(dir, 'pwned');
    const shell = new CommandShell();
    try {
      const args = [`'; touch ${marker}; '`, '$(id)', 'a "quoted" word', '`id`', '\\n'];
      assert.equal(await shell.run([echo, ...args]), args.map((a) => `[${a}]`).join(''));
      assert.equal(existsSync(marker), false);
    } finally {
      shell.close();
    }
  });

  it('rejects a command that fails or is missing, and serves on', async () => {
    const shell = new CommandShell();
    try {
      await assert.rejects(shell.run(['false']), /exit status 1/);
      await assert.rejects(shell.run([join(dir, 'no-such-tool')]), /exit status 127/);
      assert.equal(await shell.run(['printf', 'ok']), 'ok');
    } finally {
      shell.close();
    }
  });

  it('ends a command that outlasts its timeout with its shell, and starts another for the next', async () => {
    const started = join(dir, 'slow-started');
    const slow = script('slow', `echo $$ > ${started}; sleep 30`);
    const shell = new CommandShell(300);
    try {
      const first = shell.pid;
      await assert.rejects(shell.run([slow]), /did not finish within 300 ms/);
      assert.equal(shell.pid, undefined, 'the shell was ended');
      // The command went with it: its process is gone (reaped once orphaned).
      const script = Number(readFileSync(started, 'utf8'));
      await waitFor('the timed-out command to end', () => (alive(script) ? undefined : true));
      assert.equal(await shell.run(['printf', 'after']), 'after');
      assert.notEqual(shell.pid, first);
    } finally {
      shell.close();
    }
  });

  it('does not keep the event loop alive while idle', async () => {
    // A child process that runs one command and then must exit by itself.
    const code = `import('${fileURLToPath(new URL('../../../src/metrics/command-shell.ts', import.meta.url))}').then(async ({ CommandShell }) => { const s = new CommandShell(); console.log(await s.run(['printf', 'done'])); });`;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '-e', code], { encoding: 'utf8', timeout: 20_000 });
    assert.equal(out.trim(), 'done');
  });
});
