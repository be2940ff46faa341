import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { type AddressInfo, createServer } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { httpServerForFile } from '../helpers/mcp.js';
import { ROOT } from '../helpers/models.js';

/**
 * `tensorgate top` as a user runs it, against the real server after real OIP v2 traffic: the
 * frame names every model version and shows the requests just sent.
 */

const run = promisify(execFile);
const CLI = join(ROOT, 'bin', 'tensorgate.js');
const top = (...args: string[]) =>
  run(process.execPath, [CLI, 'top', ...args], { cwd: ROOT, env: { ...process.env, COLUMNS: '200' } });

const http = httpServerForFile();

async function infer(data: number[], shape: number[]): Promise<number> {
  const response = await fetch(`${http.base}/v2/models/tabular-classifier/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: [{ name: 'features', shape, datatype: 'FP32', data }] }),
  });
  await response.arrayBuffer();
  return response.status;
}

/** The cells of a table row, by column title (cells are two or more spaces apart). */
function cells(frame: string, rowStart: string): Record<string, string> {
  const lines = frame.split('\n');
  const titles = (lines.find((l) => l.startsWith('MODEL@VERSION')) ?? '').split(/\s{2,}/);
  const row = lines.find((l) => l.startsWith(rowStart));
  assert.ok(row, `a row for ${rowStart} in:\n${frame}`);
  const values = row.split(/\s{2,}/);
  return Object.fromEntries(titles.map((t, i) => [t, values[i] ?? '']));
}

describe('tensorgate top', { timeout: 300_000 }, () => {
  it('prints one frame with every model version and the requests just served', async () => {
    for (let i = 0; i < 3; i++) {
      assert.equal(await infer([5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3], [2, 4]), 200);
    }
    assert.equal(await infer([1, 2, 3, 4, 5, 6], [2, 3]), 400);
    const missing = await fetch(`${http.base}/v2/models/no-such-model/infer`, { method: 'POST', body: '{}' });
    assert.equal(missing.status, 404);

    const { stdout, stderr } = await top('--once', '--url', http.base);
    assert.equal(stderr, '');
    assert.ok(!stdout.includes('\x1b'), 'no escape codes from --once');
    const lines = stdout.split('\n');
    assert.match(lines[0] as string, /^tensorgate \S+ · up \d+\w* · \d+ models, \d+ versions/);
    assert.match(stdout, /since start: [3-9]\d* ok, [1-9]\d* failed, [6-9]\d* inferences/);
    assert.match(stdout, /^no model: 1 failed \(MODEL_NOT_FOUND 1\)/m);

    const tabular = cells(stdout, 'tabular-classifier@1 ');
    assert.equal(tabular.STATE, 'ready');
    assert.match(tabular.INST ?? '', /^\d+\/[1-9]\d*$/);
    assert.ok(Number(tabular['REQ/S']) > 0, `requests per second: ${tabular['REQ/S']}`);
    for (const p of ['P50 MS', 'P90 MS', 'P99 MS']) assert.ok(Number(tabular[p]) > 0, `${p}: ${tabular[p]}`);
    assert.match(tabular['ERR%'] ?? '', /^25% \w+$/, 'one failure in four, with its code');
    assert.ok(Number(tabular.BATCH) >= 1);
    assert.match(tabular.MEM ?? '', /^\d+(\.\d)?[KMG]$/);
    assert.match(tabular['TOP STAGE'] ?? '', /^(decode|queue|transfer|compute|encode) \d+%$/);

    // Every registered version has a row; an idle one shows dashes, not zeros.
    const { models } = (await (await fetch(`${http.base}/dashboard/api/snapshot`)).json()) as {
      models: { name: string; versions: { version: string }[] }[];
    };
    for (const m of models)
      for (const v of m.versions) assert.ok(lines.some((l) => l.startsWith(`${m.name}@${v.version} `)));
    const idle = cells(stdout, 'adder@1 ');
    assert.equal(idle['REQ/S'], '0');
    assert.equal(idle['P99 MS'], '-');
  });

  it('takes the MCP endpoint as --url too, and prints the snapshot with --json', async () => {
    const { stdout } = await top('--once', '--url', http.server.url as string, '--window', '300');
    assert.match(stdout, /^tabular-classifier@1 +ready/m);
    const json = JSON.parse((await top('--json', '--url', http.base)).stdout) as {
      window_s: number;
      models: unknown[];
    };
    assert.ok(json.window_s > 0 && json.window_s <= 60, 'the default window, or less on a young server');
    assert.ok(json.models.length > 0);
  });

  it('exits 1 naming the URL when no server answers', async () => {
    // A port that was free a moment ago: nothing listens there.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as AddressInfo;
    await new Promise((resolve) => probe.close(resolve));
    const closed = `http://127.0.0.1:${port}`;
    await assert.rejects(top('--once', '--url', closed), (err: Error & { code?: number; stderr?: string }) => {
      assert.equal(err.code, 1);
      assert.equal(
        err.stderr,
        `tensorgate: cannot reach a tensorgate server at ${closed} (ECONNREFUSED); start one with \`tensorgate serve\` or pass --url\n`,
      );
      return true;
    });
  });
});
