import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { parse as parseCsv } from 'csv-parse/sync';
import { encodeNpy } from '../../src/tensor/npy.js';
import { encodeSafetensors } from '../../src/tensor/safetensors.js';
import { makeTensor } from '../../src/tensor/tensor.js';
import { type Connected, connect, waitForUrl } from '../helpers/mcp.js';
import { ensureDigitsModels, ensureTestModels, ROOT } from '../helpers/models.js';

/**
 * Batch jobs end to end: the real CLI, the official MCP client, real torch workers reading real
 * PNG files. A job over a folder writes every item's answer once; a bad file is recorded with its
 * code while the job goes on; cancelling leaves a consistent file; a full disk (the kernel's
 * /dev/full, which answers every write with ENOSPC) pauses the job until it is resumed; a server
 * killed with SIGKILL mid-job resumes it at its restart, and the file still holds each item
 * exactly once.
 */

interface Job {
  id: string;
  state: string;
  items: number;
  done: number;
  failed: number;
  errors: Record<string, number>;
  failed_items?: Record<string, string[]>;
  items_per_second?: number;
  ms_per_item?: Record<string, number>;
  results: string;
  error?: string;
  in_flight?: number;
}

interface Line {
  index: number;
  item: string;
  predictions?: { label: string; score: number }[];
  error?: { code: string; message: string };
}

const run = promisify(execFile);
const models = ensureDigitsModels();
const examples = join(models, 'digits', 'examples');
const labels = JSON.parse(readFileSync(join(examples, 'labels.json'), 'utf8')) as Record<string, number>;
const pngs = Object.keys(labels);

async function call(client: Client, name: string, args: Record<string, unknown>) {
  const result = (await client.callTool({ name, arguments: args })) as {
    isError?: boolean;
    content: { text?: string }[];
    structuredContent?: unknown;
  };
  return { ...result, text: result.content[0]?.text ?? '' };
}

async function job(client: Client, name: string, args: Record<string, unknown>): Promise<Job> {
  const result = await call(client, name, args);
  assert.notEqual(result.isError, true, result.text);
  return result.structuredContent as Job;
}

async function until(client: Client, id: string, done: (j: Job) => boolean, timeoutMs = 90_000): Promise<Job> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const current = await job(client, 'get_job', { id });
    if (done(current)) return current;
    if (Date.now() > deadline) throw new Error(`job ${id} is still ${JSON.stringify(current)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What test/fixtures/mcp_task_client.py reports. */
interface TaskReport {
  protocol_version: string;
  capability: unknown;
  task_support: Record<string, string | null>;
  created: { taskId: string; status: string; ttl: number | null; pollInterval?: number };
  polled: string[];
  result: {
    isError: boolean | null;
    structured: Job;
    text: string;
    links: string[];
    related_task: unknown;
  };
  listed: string[];
  cancelled: { status: string };
  cancelled_get: string;
  cancelled_job: Job;
  cancel_again: RpcError | null;
  cancelled_result_state: string;
  not_a_task_tool: RpcError | null;
  unknown_task: RpcError | null;
  outside_roots: RpcError | null;
  plain_list_jobs: number;
}
interface RpcError {
  code: number;
  message: string;
}

/** The Python environment with the MCP Python SDK and pyarrow (scripts/install-python-clients.sh). */
const PYCLIENTS = join(ROOT, '.tensorgate', 'pyclients', 'bin', 'python');

interface ParquetRow {
  index: number;
  item: string;
  label: string | null;
  score: number | null;
  error: string | null;
  error_message: string | null;
  answer: string | null;
}

/** A .npy file as numpy loads it (memory-mapped, as a reader would while the job runs); NaN as null. */
async function loadNpy(path: string): Promise<{ shape: number[]; dtype: string; rows: (number | null)[][] }> {
  const script = [
    'import json, sys, numpy as np',
    'a = np.load(sys.argv[1], mmap_mode="r")',
    'rows = [[None if v != v else v for v in row] for row in np.asarray(a).reshape(a.shape[0], -1).tolist()]',
    'print(json.dumps({"shape": list(a.shape), "dtype": str(a.dtype), "rows": rows}))',
  ].join('\n');
  const { stdout } = await run(PYCLIENTS, ['-c', script, path], { maxBuffer: 64 * 1024 * 1024 });
  return JSON.parse(stdout) as { shape: number[]; dtype: string; rows: (number | null)[][] };
}

/** A Parquet file as Apache Arrow reads it: each column's type, and the rows. */
async function readParquet(path: string): Promise<{ types: Record<string, string>; rows: ParquetRow[] }> {
  const script = [
    'import json, sys, pyarrow.parquet as pq',
    't = pq.read_table(sys.argv[1])',
    'rows = [{k: (v if v is None or isinstance(v, (int, float, str)) else json.dumps(v)) for k, v in r.items()} for r in t.to_pylist()]',
    'print(json.dumps({"types": {f.name: str(f.type) for f in t.schema}, "rows": rows}))',
  ].join('\n');
  const { stdout } = await run(PYCLIENTS, ['-c', script, path], { maxBuffer: 64 * 1024 * 1024 });
  return JSON.parse(stdout) as { types: Record<string, string>; rows: ParquetRow[] };
}

function lines(path: string): Line[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Line);
}

/** Each index 0..n-1 exactly once, in order. */
function assertEachOnce(found: Line[], n: number): void {
  assert.deepEqual(
    found.map((l) => l.index),
    Array.from({ length: n }, (_, i) => i),
  );
}

describe('batch jobs over MCP', () => {
  let server: Connected;
  let inbox: string;
  /** The first `count` digits of the inbox (all of them when absent), then the broken file when asked. */
  const inboxFiles = (count = pngs.length, broken = false) => [
    ...pngs.slice(0, count).map((p) => join(inbox, p)),
    ...(broken ? [join(inbox, 'digit-broken.png')] : []),
  ];
  /** The inbox's digits `times` over: by default a job long enough to act on while it runs. */
  const longFiles = (times = 40) => Array.from({ length: times }, () => inboxFiles()).flat();

  before(async () => {
    server = await connect('http', undefined, [], models, ['--allow-root', '/dev/full']);
    inbox = join(server.workDir, 'inbox');
    mkdirSync(inbox);
    for (const png of pngs) copyFileSync(join(examples, png), join(inbox, png));
    // Its first bytes say PNG; its body does not decode.
    writeFileSync(
      join(inbox, 'digit-broken.png'),
      Buffer.concat([readFileSync(join(examples, pngs[0] as string)).subarray(0, 40), Buffer.alloc(60, 7)]),
    );
    writeFileSync(join(inbox, 'notes.txt'), 'not matched by the pattern');
  });
  after(async () => {
    await server?.close();
  });

  it('runs the model over a folder: every item answered once, a bad file recorded with its code', async () => {
    const results = join(server.workDir, 'digits.jsonl');
    const started = await job(server.client, 'start_job', {
      model: 'digits',
      items: { folder: inbox, pattern: '*.png' },
      results,
    });
    assert.equal(started.state, 'running');
    assert.equal(started.items, pngs.length + 1);
    const finished = await until(server.client, started.id, (j) => j.state !== 'running');
    assert.equal(finished.state, 'completed', finished.error);
    assert.equal(finished.done, pngs.length + 1);
    assert.deepEqual(finished.errors, { BAD_IMAGE: 1 });
    // The summary: which items failed, its pace over its running time, where the time went.
    assert.deepEqual(finished.failed_items, { BAD_IMAGE: [join(inbox, 'digit-broken.png')] });
    assert.ok((finished.items_per_second ?? 0) > 0);
    assert.ok((finished.ms_per_item?.compute ?? 0) > 0, JSON.stringify(finished.ms_per_item));
    assert.ok((finished.ms_per_item?.preprocess ?? 0) > 0, 'the images are decoded in the worker');
    const summary = await call(server.client, 'get_job', { id: started.id });
    assert.match(summary.text, /\n[\d.]+ items\/s; ms per item: decode [\d.]+, preprocess [\d.]+, queue/);
    assert.match(summary.text, /\nBAD_IMAGE: \S+digit-broken\.png$/);
    const found = lines(results);
    assertEachOnce(found, pngs.length + 1);
    const broken = found.filter((l) => l.error);
    assert.equal(broken.length, 1);
    assert.match(broken[0]?.item ?? '', /digit-broken\.png$/);
    assert.match(broken[0]?.error?.message ?? '', /corrupt|truncated/);
    let right = 0;
    for (const line of found.filter((l) => !l.error)) {
      const name = line.item.split('/').at(-1) as string;
      if (line.predictions?.[0]?.label === String(labels[name])) right++;
    }
    assert.ok(right >= 0.97 * pngs.length, `${right} of ${pngs.length} digits read right`);

    const listed = await call(server.client, 'list_jobs', {});
    assert.match(
      listed.text,
      new RegExp(
        `job ${started.id} \\(digits\\): completed, ${pngs.length + 1}/${pngs.length + 1} items, 1 failed \\(BAD_IMAGE 1\\)`,
      ),
    );
  });

  it('writes CSV when the results file ends in .csv: top label, score, error, the answer as JSON', async () => {
    const results = join(server.workDir, 'digits.csv');
    const files = inboxFiles(3, true);
    const finished = await job(server.client, 'start_job', {
      model: 'digits',
      items: { files },
      results,
      wait: true,
    });
    assert.equal(finished.state, 'completed');
    const rows = parseCsv(readFileSync(results), { columns: true }) as Record<string, string>[];
    assert.deepEqual(
      rows.map((r) => [r.index, r.item]),
      files.map((f, i) => [String(i), f]),
    );
    for (const [i, png] of pngs.slice(0, 3).entries()) {
      assert.equal(rows[i]?.label, String(labels[png]), png);
      assert.ok(Number(rows[i]?.score) > 0.5);
      const answer = JSON.parse(rows[i]?.answer ?? '') as { predictions: { label: string }[] };
      assert.equal(answer.predictions[0]?.label, rows[i]?.label);
    }
    assert.equal(rows[3]?.error, 'BAD_IMAGE');
    assert.match(rows[3]?.error_message ?? '', /corrupt|truncated/);
  });

  it('writes Parquet when the results file ends in .parquet: the CSV columns, read back with pyarrow', async () => {
    assert.ok(existsSync(PYCLIENTS), 'pyarrow is missing: run bash scripts/install-python-clients.sh');
    const results = join(server.workDir, 'digits.parquet');
    const files = inboxFiles(pngs.length, true);
    const finished = await job(server.client, 'start_job', { model: 'digits', items: { files }, results, wait: true });
    assert.equal(finished.state, 'completed', finished.error);
    assert.equal(existsSync(`${results}.partial.jsonl`), false, 'the lines file goes once the table is written');
    const table = await readParquet(results);
    assert.deepEqual(table.types, {
      index: 'int64',
      item: 'string',
      label: 'string',
      score: 'double',
      text: 'string',
      error: 'string',
      error_message: 'string',
      answer: table.types.answer === 'extension<arrow.json>' ? 'extension<arrow.json>' : 'string',
    });
    assert.deepEqual(
      table.rows.map((r) => [r.index, r.item]),
      files.map((f, i) => [i, f]),
    );
    let right = 0;
    for (const [i, png] of pngs.entries()) {
      const row = table.rows[i] as ParquetRow;
      assert.equal(row.error, null);
      const answer = JSON.parse(row.answer as string) as { predictions: { label: string; score: number }[] };
      assert.equal(answer.predictions[0]?.label, row.label);
      assert.equal(answer.predictions[0]?.score, row.score);
      if (row.label === String(labels[png])) right++;
    }
    assert.ok(right >= 0.97 * pngs.length, `${right} of ${pngs.length} digits read right`);
    const broken = table.rows.at(-1) as ParquetRow;
    assert.equal(broken.error, 'BAD_IMAGE');
    assert.match(broken.error_message ?? '', /corrupt|truncated/);
    assert.equal(broken.label, null);

    // Cancelled mid-job: the table holds exactly the committed items, in order.
    const cancelledResults = join(server.workDir, 'cancelled.parquet');
    const many = longFiles();
    const started = await job(server.client, 'start_job', {
      model: 'digits',
      items: { files: many },
      results: cancelledResults,
      batch: 4,
    });
    await until(server.client, started.id, (j) => j.done > 0);
    assert.equal(existsSync(cancelledResults), false, 'a Parquet file is written when the job ends');
    const cancelled = await job(server.client, 'cancel_job', { id: started.id });
    assert.equal(cancelled.state, 'cancelled');
    const partial = await readParquet(cancelledResults);
    assert.deepEqual(
      partial.rows.map((r) => r.index),
      Array.from({ length: cancelled.done }, (_, i) => i),
    );
  });

  it('writes the output tensors as .npy files when asked: row i is item i, NaN for a failed one', async () => {
    const results = join(server.workDir, 'logits.jsonl');
    const files = inboxFiles(5, true);
    const finished = await job(server.client, 'start_job', {
      model: 'digits',
      items: { files },
      results,
      tensors: 'npy',
      wait: true,
    });
    assert.equal(finished.state, 'completed', finished.error);
    const npy = join(server.workDir, 'logits.logits.npy');
    assert.deepEqual((finished as Job & { tensors?: unknown }).tensors, { logits: npy });
    const logits = await loadNpy(npy);
    assert.deepEqual(logits.shape, [files.length, 10]);
    assert.equal(logits.dtype, 'float32');
    const found = lines(results) as (Line & { predictions?: { index: number }[]; outputs?: unknown })[];
    for (const [i, line] of found.slice(0, 5).entries()) {
      const row = logits.rows[i] as number[];
      assert.equal(row.indexOf(Math.max(...row)), line.predictions?.[0]?.index, `item ${i}: argmax of its logits`);
      assert.equal(line.outputs, undefined);
    }
    assert.ok(
      logits.rows[5]?.every((v) => v === null),
      'the broken file has a row of NaN',
    );
    assert.equal(found[5]?.error?.code, 'BAD_IMAGE');

    writeFileSync(join(server.workDir, 'taken.logits.npy'), 'x');
    const taken = await call(server.client, 'start_job', {
      model: 'digits',
      items: { files },
      results: join(server.workDir, 'taken.jsonl'),
      tensors: 'npy',
    });
    assert.match(taken.text, /^RESULTS_EXIST: tensors: .*taken\.logits\.npy exists/);
  });

  it('is started, watched and listed from the CLI against the running server', async () => {
    const results = join(server.workDir, 'cli.jsonl');
    const cli = (...args: string[]) =>
      run(process.execPath, [join(ROOT, 'bin', 'tensorgate.js'), 'job', ...args, '--url', server.url as string], {
        cwd: ROOT,
      });
    const started = await cli('start', 'digits', '--folder', inbox, '--pattern', 'digit-0*.png', '--results', results);
    const id = /^job (\S+) \(digits\): running, \d+\/(\d+) items/.exec(started.stdout);
    assert.ok(id, started.stdout);
    const finished = await until(server.client, id[1] as string, (j) => j.state !== 'running');
    assert.equal(finished.state, 'completed');
    assert.equal(lines(results).length, Number(id[2]));
    const status = await cli('status', id[1] as string);
    assert.match(
      status.stdout,
      new RegExp(`^job ${id[1]} \\(digits\\): completed, ${id[2]}/${id[2]} items; results in ${results}`),
    );
    assert.match((await cli('list')).stdout, new RegExp(`job ${id[1]} `));
    await assert.rejects(cli('start', 'digits', '--folder', inbox, '--results', results), (err: { stderr: string }) => {
      assert.match(err.stderr, /RESULTS_EXIST: /);
      return true;
    });
  });

  it('refuses what it cannot run, with codes, before starting anything', async () => {
    const results = join(server.workDir, 'refused.jsonl');
    const refused = async (args: Record<string, unknown>, code: string, message: RegExp) => {
      const result = await call(server.client, 'start_job', { model: 'digits', results, ...args });
      assert.equal(result.isError, true, result.text);
      assert.match(result.text, new RegExp(`^${code}: `));
      assert.match(result.text, message);
    };
    await refused({ items: { folder: '/etc' } }, 'PATH_NOT_ALLOWED', /outside the allowed roots/);
    await refused({ items: { folder: join(inbox, 'missing') } }, 'FILE_NOT_FOUND', /is not a folder/);
    await refused({ items: { folder: inbox, pattern: '*.gif' } }, 'BAD_PARAMETER', /has no items/);
    writeFileSync(results, 'already here\n');
    await refused({ items: { folder: inbox } }, 'RESULTS_EXIST', /pass "overwrite": true/);
    await refused(
      { items: { folder: inbox }, results: 'relative.jsonl' },
      'BAD_PARAMETER',
      /absolute path ending in \.jsonl, \.csv or \.parquet/,
    );
    await refused({ model: 'nope', items: { folder: inbox } }, 'MODEL_NOT_FOUND', /nope/);
    assert.equal(readFileSync(results, 'utf8'), 'already here\n', 'a refused job writes nothing');
    // A link under the roots may not lead out of them, nor nowhere.
    const outward = join(server.workDir, 'outward.jsonl');
    symlinkSync('/etc/hostname', outward);
    await refused(
      { items: { folder: inbox }, results: outward, overwrite: true },
      'PATH_NOT_ALLOWED',
      /leads to \/etc\/hostname, which is outside the allowed roots/,
    );
    const dangling = join(server.workDir, 'dangling.jsonl');
    symlinkSync(join(server.workDir, 'missing', 'x.jsonl'), dangling);
    await refused(
      { items: { folder: inbox }, results: dangling, overwrite: true },
      'PATH_NOT_ALLOWED',
      /leads nowhere/,
    );
    const missing = await call(server.client, 'get_job', { id: 'nope' });
    assert.match(missing.text, /^JOB_NOT_FOUND: /);
  });

  it('stops when cancelled, leaving every committed line once and nothing after', async () => {
    const results = join(server.workDir, 'cancelled.jsonl');
    const files = longFiles();
    const started = await job(server.client, 'start_job', { model: 'digits', items: { files }, results, batch: 4 });
    await until(server.client, started.id, (j) => j.done > 0);
    // While it runs, get_metrics shows it with its pace (the dashboard and `top` read the same).
    const metrics = await call(server.client, 'get_metrics', {});
    const running = (metrics.structuredContent as { jobs?: (Job & { items_per_second?: number })[] }).jobs ?? [];
    assert.equal(running.find((j) => j.id === started.id)?.state, 'running', metrics.text);
    assert.match(metrics.text, new RegExp(`job ${started.id} \\(digits\\): running, \\d+/${files.length} items`));
    const cancelled = await job(server.client, 'cancel_job', { id: started.id });
    assert.equal(cancelled.state, 'cancelled');
    assert.ok(cancelled.done < files.length, 'it stopped before the end');
    assertEachOnce(lines(results), cancelled.done);
    // The model serves interactive calls on.
    const answer = await call(server.client, 'digits', { image: join(inbox, pngs[1] as string) });
    assert.notEqual(answer.isError, true, answer.text);
  });

  it('gives way to interactive calls: while they come, the job has one item in flight at a time', async () => {
    const results = join(server.workDir, 'shared.jsonl');
    const files = longFiles(60);
    const started = await job(server.client, 'start_job', { model: 'digits', items: { files }, results, batch: 8 });
    // Alone, it soon has requests of several items in flight (it starts at one and doubles).
    await until(server.client, started.id, (j) => (j.in_flight ?? 0) > 2);
    // Right after each interactive call, how many of the job's items are in flight: a count, not
    // a timing. The first call may still find full requests sent before it came; after that the
    // job sends one item at a time, so a call waits behind at most that one.
    const inFlight: number[] = [];
    for (let i = 0; i < 10; i++) {
      const answer = await call(server.client, 'digits', { image: join(inbox, pngs[i % pngs.length] as string) });
      assert.notEqual(answer.isError, true, answer.text);
      const current = await job(server.client, 'get_job', { id: started.id });
      if (current.state !== 'running') break;
      inFlight.push(current.in_flight ?? -1);
    }
    // Calls back to back keep the model busy, but not the job stalled: it still sends an item now
    // and then (at least one a second).
    const before = (await job(server.client, 'get_job', { id: started.id })).done;
    let after = before;
    for (let i = 0; i < 2000 && after === before; i++) {
      await call(server.client, 'digits', { image: join(inbox, pngs[i % pngs.length] as string) });
      if (i % 20 === 19) after = (await job(server.client, 'get_job', { id: started.id })).done;
    }
    assert.ok(after > before, 'the job went on while the calls came');
    await job(server.client, 'cancel_job', { id: started.id });
    assert.ok(inFlight.length >= 6, `the job ran on through ${inFlight.length} calls`);
    assert.ok(
      inFlight.slice(2).every((n) => n <= 1),
      `items of the job in flight after each interactive call: ${inFlight.join(', ')}`,
    );
    assertEachOnce(lines(results), (await job(server.client, 'get_job', { id: started.id })).done);
  });

  it('is run over plain HTTP too: POST /v2/jobs, GET /v2/jobs/ID, cancel, with codes on bad input', async () => {
    const base = (server.url as string).replace(/\/mcp$/, '');
    const results = join(server.workDir, 'http.jsonl');
    const files = longFiles(20);
    const post = (path: string, body: unknown) =>
      fetch(`${base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const created = await post('/v2/jobs', { model: 'digits', items: { files }, results, batch: 4 });
    assert.equal(created.status, 201, await created.clone().text());
    const { id } = (await created.json()) as Job;
    for (;;) {
      const current = (await (await fetch(`${base}/v2/jobs/${id}`)).json()) as Job;
      if (current.done > 0) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const cancelled = await post(`/v2/jobs/${id}/cancel`, {});
    assert.equal(cancelled.status, 200);
    const stopped = (await cancelled.json()) as Job;
    assert.equal(stopped.state, 'cancelled');
    assertEachOnce(lines(results), stopped.done);
    const listed = (await (await fetch(`${base}/v2/jobs`)).json()) as { jobs: Job[] };
    assert.equal(listed.jobs.find((j) => j.id === id)?.state, 'cancelled');

    const unknown = await fetch(`${base}/v2/jobs/nope`);
    assert.equal(unknown.status, 404);
    assert.match(((await unknown.json()) as { error: string }).error, /^JOB_NOT_FOUND: /);
    const exists = await post('/v2/jobs', { model: 'digits', items: { files }, results });
    assert.equal(exists.status, 409);
    assert.match(((await exists.json()) as { error: string }).error, /^RESULTS_EXIST: /);
    const invalid = await post('/v2/jobs', { model: 'digits', results, wait: true });
    assert.equal(invalid.status, 400);
    assert.match(((await invalid.json()) as { error: string }).error, /^BAD_PARAMETER: the job is not valid: /);
    const notPaused = await post(`/v2/jobs/${id}/resume`, {});
    assert.equal(notPaused.status, 409);
    assert.match(((await notPaused.json()) as { error: string }).error, /^JOB_NOT_PAUSED: job \S+ is cancelled/);
  });

  it('waits when asked, sending progress notifications, and links the results file', async () => {
    const results = join(server.workDir, 'waited.jsonl');
    const files = longFiles(8);
    const progress: { progress: number; total?: number }[] = [];
    const result = (await server.client.callTool(
      { name: 'start_job', arguments: { model: 'digits', items: { files }, results, batch: 8, wait: true } },
      { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true },
    )) as { isError?: boolean; content: { type: string; text?: string; uri?: string }[]; structuredContent?: Job };
    assert.notEqual(result.isError, true, result.content[0]?.text);
    assert.equal(result.structuredContent?.state, 'completed', 'the answer came once the job had stopped');
    assert.equal(result.structuredContent?.done, files.length);
    assert.ok(progress.length >= 2, `${progress.length} progress notifications`);
    assert.ok(
      progress.every((p, i) => p.total === files.length && (i === 0 || p.progress > (progress[i - 1]?.progress ?? 0))),
      JSON.stringify(progress),
    );
    assert.equal(progress.at(-1)?.progress, files.length);
    const link = result.content.find((c) => c.type === 'resource_link');
    assert.equal(link?.uri, `file://${results}`);
    assertEachOnce(lines(results), files.length);
  });

  it('runs as an MCP task for a client with task support (the MCP Python SDK): get, result, list, cancel', async () => {
    assert.ok(existsSync(PYCLIENTS), 'the MCP Python SDK is missing: run bash scripts/install-python-clients.sh');
    const results = join(server.workDir, 'task.jsonl');
    const longResults = join(server.workDir, 'task-cancelled.jsonl');
    const config = {
      folder: inbox,
      pattern: 'digit-0*.png',
      results,
      long_files: longFiles(),
      long_results: longResults,
      outside: tmpdir(),
    };
    const configFile = join(server.workDir, 'task-client.json');
    writeFileSync(configFile, JSON.stringify(config));
    const client = join(ROOT, 'test/fixtures/mcp_task_client.py');
    const out = await run(PYCLIENTS, [client, server.url as string, configFile], { timeout: 120_000 });
    const report = JSON.parse(out.stdout) as TaskReport;
    assert.equal(report.protocol_version, '2025-11-25');
    assert.deepEqual(report.capability, { list: {}, cancel: {}, requests: { tools: { call: {} } } });
    assert.equal(report.task_support.start_job, 'optional');
    assert.equal(report.task_support.get_job, null);

    const expected = pngs.filter((p) => p.startsWith('digit-0')).length;
    assert.equal(report.created.status, 'working');
    assert.equal(report.created.ttl, null, 'a task lives as long as its job record');
    assert.equal(report.created.pollInterval, 1000);
    assert.equal(report.polled.at(-1), 'completed');
    assert.equal(report.result.isError, false);
    assert.equal(report.result.structured.id, report.created.taskId);
    assert.equal(report.result.structured.state, 'completed');
    assert.equal(report.result.structured.done, expected);
    assert.deepEqual(report.result.related_task, { taskId: report.created.taskId });
    assert.deepEqual(report.result.links, [`file://${results}`]);
    assertEachOnce(lines(results), expected);
    assert.ok(report.listed.includes(report.created.taskId));

    assert.equal(report.cancelled.status, 'cancelled');
    assert.equal(report.cancelled_get, 'cancelled');
    assert.equal(report.cancelled_result_state, 'cancelled');
    assert.ok(report.cancelled_job.done < config.long_files.length, 'it stopped before the end');
    assertEachOnce(lines(longResults), report.cancelled_job.done);
    assert.equal(report.cancel_again?.code, -32602);
    assert.match(report.cancel_again?.message ?? '', /already cancelled/);

    assert.equal(report.not_a_task_tool?.code, -32601);
    assert.match(report.not_a_task_tool?.message ?? '', /list_models does not run as a task/);
    assert.match(report.unknown_task?.message ?? '', /^JOB_NOT_FOUND: /);
    assert.match(report.outside_roots?.message ?? '', /^PATH_NOT_ALLOWED: /);
    assert.ok(report.plain_list_jobs >= 2);
  });

  it('pauses with DISK_FULL when the disk refuses its writes, and resumes once there is room', async () => {
    // The results path is a link to /dev/full: every write to it fails with ENOSPC, as on a full disk.
    const results = join(server.workDir, 'full.jsonl');
    symlinkSync('/dev/full', results);
    const files = longFiles(4);
    const started = await job(server.client, 'start_job', {
      model: 'digits',
      items: { files },
      results,
      batch: 8,
      overwrite: true,
    });
    const paused = await until(server.client, started.id, (j) => j.state !== 'running');
    assert.equal(paused.state, 'paused');
    assert.match(paused.error ?? '', /^DISK_FULL: the results file .* cannot grow \(ENOSPC\)/);
    assert.equal(paused.done, 0, 'nothing the disk refused is counted as done');
    // A CSV file starts with its header: on a full disk the job is refused before it starts.
    const fullCsv = join(server.workDir, 'full.csv');
    symlinkSync('/dev/full', fullCsv);
    const csv = await call(server.client, 'start_job', {
      model: 'digits',
      items: { files },
      results: fullCsv,
      overwrite: true,
    });
    assert.match(csv.text, /^DISK_FULL: the results file .* cannot be written \(ENOSPC\)/);
    const refused = await call(server.client, 'resume_job', { id: 'nope' });
    assert.match(refused.text, /^JOB_NOT_FOUND: /);

    // Room again: the same path now leads to a file on a disk with space.
    const room = join(server.workDir, 'room.jsonl');
    writeFileSync(room, '');
    unlinkSync(results);
    symlinkSync(room, results);
    const resumed = await job(server.client, 'resume_job', { id: started.id });
    assert.equal(resumed.state, 'running');
    const finished = await until(server.client, started.id, (j) => j.state !== 'running');
    assert.equal(finished.state, 'completed', finished.error);
    assertEachOnce(lines(room), files.length);
    const again = await call(server.client, 'resume_job', { id: started.id });
    assert.match(again.text, /^JOB_NOT_PAUSED: job \S+ is completed/);
  });

  it('goes on when its model is unloaded mid-job: the next request loads it again', async () => {
    const results = join(server.workDir, 'unloaded.jsonl');
    const files = longFiles(30);
    const started = await job(server.client, 'start_job', { model: 'digits', items: { files }, results, batch: 4 });
    await until(server.client, started.id, (j) => j.done > 0);
    const unloaded = await call(server.client, 'unload_model', { model: 'digits' });
    assert.notEqual(unloaded.isError, true, unloaded.text);
    const finished = await until(server.client, started.id, (j) => j.state !== 'running', 150_000);
    assert.equal(finished.state, 'completed', finished.error);
    assert.equal(finished.failed, 0);
    assertEachOnce(lines(results), files.length);
  });
});

describe("a batch job over an array's rows, for a model that takes tensors", () => {
  let server: Connected;
  before(async () => {
    // Only the tensor models it calls, for a quick start.
    const repo = mkdtempSync(join(tmpdir(), 'tg-jobs-rows-'));
    for (const model of ['row_sum', 'typed', 'mlp']) symlinkSync(join(ensureTestModels(), model), join(repo, model));
    server = await connect('http', undefined, [], repo);
  });
  after(async () => {
    await server?.close();
  });

  it('answers each row of a .npy file: the rows read straight from the file, a line each', async () => {
    const rows = 300;
    const width = 5;
    const values = Float32Array.from({ length: rows * width }, (_, i) => ((i * 7919) % 1000) / 100 - 5);
    const array = join(server.workDir, 'features.npy');
    writeFileSync(array, encodeNpy(makeTensor('float32', [rows, width], new Uint8Array(values.buffer))));
    const results = join(server.workDir, 'sums.jsonl');
    const finished = await job(server.client, 'start_job', {
      model: 'row_sum',
      items: { rows: array },
      results,
      wait: true,
    });
    assert.equal(finished.state, 'completed', finished.error);
    assert.equal(finished.items, rows);
    const found = lines(results) as (Line & { outputs?: { sum: number[] } })[];
    assertEachOnce(found, rows);
    found.forEach((line, r) => {
      const expected = values.slice(r * width, (r + 1) * width).reduce((a, b) => a + b, 0);
      assert.equal(line.item, `${array}[${r}]`);
      assert.ok(Math.abs((line.outputs?.sum[0] ?? Number.NaN) - expected) < 1e-4, `row ${r}: ${line.outputs?.sum}`);
    });

    const refused = async (model: string, items: unknown, pattern: RegExp) => {
      const result = await call(server.client, 'start_job', {
        model,
        items,
        results: join(server.workDir, 'refused.jsonl'),
      });
      assert.equal(result.isError, true, result.text);
      assert.match(result.text, pattern);
    };
    await refused('typed', { rows: array }, /^DTYPE_MISMATCH: .* holds float32; model "typed"'s input "x" takes int64/);
    await refused(
      'mlp',
      { rows: array },
      /^SHAPE_MISMATCH: .* rows of shape \[5\]; model "mlp"'s input "x" takes \[-1, 4\]/,
    );
    await refused('row_sum', { folder: server.workDir }, /^BAD_PARAMETER: .*takes tensors, not files or texts/);
    await refused('row_sum', { rows: '/etc/hostname' }, /^PATH_NOT_ALLOWED: /);
  });

  it("writes a tensor model's outputs as .npy rows, whole, leaving them out of the lines", async () => {
    const rows = 200;
    const width = 3;
    const values = Float32Array.from({ length: rows * width }, (_, i) => (i % 17) - 8);
    const array = join(server.workDir, 'small.npy');
    writeFileSync(array, encodeNpy(makeTensor('float32', [rows, width], new Uint8Array(values.buffer))));
    const results = join(server.workDir, 'small-sums.csv');
    const finished = await job(server.client, 'start_job', {
      model: 'row_sum',
      items: { rows: array },
      results,
      tensors: 'npy',
      batch: 32,
      wait: true,
    });
    assert.equal(finished.state, 'completed', finished.error);
    const sums = await loadNpy(join(server.workDir, 'small-sums.sum.npy'));
    assert.deepEqual(sums.shape, [rows]);
    sums.rows.forEach(([sum], r) => {
      assert.equal(
        sum,
        values.slice(r * width, (r + 1) * width).reduce((a, b) => a + b, 0),
        `row ${r}`,
      );
    });
    const table = parseCsv(readFileSync(results), { columns: true }) as Record<string, string>[];
    assert.equal(table.length, rows);
    assert.ok(
      table.every((r) => r.answer === ''),
      'the rows are in the .npy file, not the lines',
    );
  });

  it("answers each row of a .safetensors file's tensor, named when the file holds several", async () => {
    const rows = 120;
    const width = 5;
    const values = Float32Array.from({ length: rows * width }, (_, i) => ((i * 104729) % 997) / 50 - 10);
    const ids = BigInt64Array.from({ length: rows }, (_, i) => BigInt(i));
    const file = join(server.workDir, 'features.safetensors');
    writeFileSync(
      file,
      encodeSafetensors({
        features: makeTensor('float32', [rows, width], new Uint8Array(values.buffer)),
        ids: makeTensor('int64', [rows], new Uint8Array(ids.buffer)),
      }),
    );
    const results = join(server.workDir, 'safetensors-sums.jsonl');
    const finished = await job(server.client, 'start_job', {
      model: 'row_sum',
      items: { rows: file, tensor: 'features' },
      results,
      batch: 16,
      wait: true,
    });
    assert.equal(finished.state, 'completed', finished.error);
    const found = lines(results) as (Line & { outputs?: { sum: number[] } })[];
    assertEachOnce(found, rows);
    found.forEach((line, r) => {
      const expected = values.slice(r * width, (r + 1) * width).reduce((a, b) => a + b, 0);
      assert.equal(line.item, `${file}:features[${r}]`);
      assert.ok(Math.abs((line.outputs?.sum[0] ?? Number.NaN) - expected) < 1e-4, `row ${r}: ${line.outputs?.sum}`);
    });

    const refused = async (items: unknown, pattern: RegExp) => {
      const result = await call(server.client, 'start_job', {
        model: 'row_sum',
        items,
        results: join(server.workDir, 'refused.jsonl'),
      });
      assert.equal(result.isError, true, result.text);
      assert.match(result.text, pattern);
    };
    await refused({ rows: file }, /^BAD_PARAMETER: items\.rows: .* holds the tensors features, ids; name the one/);
    await refused(
      { rows: file, tensor: 'nope' },
      /^BAD_PARAMETER: items\.rows: .* has no tensor "nope"; it holds features, ids/,
    );
    await refused({ rows: file, tensor: 'ids' }, /^DTYPE_MISMATCH: .*:ids holds int64; model "row_sum"'s input/);
    const truncated = join(server.workDir, 'truncated.safetensors');
    writeFileSync(truncated, readFileSync(file).subarray(0, 200));
    await refused({ rows: truncated }, /^BAD_TENSOR: \.safetensors: /);
  });
});

describe('a batch job survives its server being killed', () => {
  let work: string;
  let child: ChildProcess | undefined;

  const start = async (): Promise<{ client: Client; child: ChildProcess }> => {
    const proc = spawn(
      process.execPath,
      [
        join(ROOT, 'bin', 'tensorgate.js'),
        '--models',
        models,
        '--registry',
        join(work, 'registry.db'),
        '--allow-root',
        work,
        'serve',
        '--http',
        '0',
      ],
      { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    child = proc;
    const url = await waitForUrl(proc);
    const client = new Client({ name: 'tensorgate-tests', version: '0.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    return { client, child: proc };
  };

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'tg-jobs-kill-'));
  });
  after(() => {
    child?.kill('SIGKILL');
  });

  it('resumes at the restart from its last commit: each item in the file exactly once', {
    timeout: 180_000,
  }, async () => {
    const results = join(work, 'resumed.jsonl');
    const files = Array.from({ length: 30 }, () => pngs.map((p) => join(examples, p))).flat();
    writeFileSync(join(work, 'files.json'), JSON.stringify(files));
    // The examples are outside `work`: give the job its own copies under the allowed root.
    const local = join(work, 'examples');
    mkdirSync(local);
    for (const p of pngs) copyFileSync(join(examples, p), join(local, p));
    const items = files.map((f) => join(local, f.split('/').at(-1) as string));

    const first = await start();
    const started = await job(first.client, 'start_job', {
      model: 'digits',
      items: { files: items },
      results,
      batch: 4,
      tensors: 'npy',
    });
    await until(first.client, started.id, (j) => j.done >= 40);
    first.child.kill('SIGKILL');
    await new Promise((r) => first.child.once('exit', r));
    const atKill = lines(results).length;
    assert.ok(atKill < items.length, `the job had ${atKill} of ${items.length} lines when its server was killed`);
    // The .npy file is a valid array of what was committed, even after a kill.
    const logitsPath = join(work, 'resumed.logits.npy');
    const killed = await loadNpy(logitsPath);
    assert.ok(killed.shape[0] !== undefined && killed.shape[0] >= 40 && killed.shape[0] <= atKill, `${killed.shape}`);

    const second = await start();
    const resumed = await until(second.client, started.id, (j) => j.state !== 'running', 150_000);
    assert.equal(resumed.state, 'completed', resumed.error);
    assert.equal(resumed.done, items.length);
    const found = lines(results);
    assertEachOnce(found, items.length);
    assert.ok(
      found.every((l, i) => l.item === items[i] && l.predictions?.length),
      'every line answers its own item',
    );
    const logits = await loadNpy(logitsPath);
    assert.deepEqual(logits.shape, [items.length, 10]);
    logits.rows.forEach((row, i) => {
      const values = row as number[];
      const top = (found[i] as Line & { predictions: { index: number }[] }).predictions[0]?.index;
      assert.equal(values.indexOf(Math.max(...values)), top, `row ${i} is item ${i}'s logits`);
    });
    await second.client.close();
    second.child.kill('SIGTERM');
    await new Promise((r) => second.child.once('exit', r));
    assert.ok(existsSync(results) && readdirSync(work).includes('registry.db'));
  });
});
