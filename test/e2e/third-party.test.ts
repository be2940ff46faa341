import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stripVTControlCharacters } from 'node:util';
import { waitForUrl } from '../helpers/mcp.js';
import { ensureTestModels, ROOT } from '../helpers/models.js';

/**
 * The real CLI checked by third-party MCP tools, not by our own client:
 * - `@modelcontextprotocol/conformance` runs its generic server scenarios against `serve --http`
 *   (on Node 22: the checker needs it; the server runs on the Node running these tests);
 * - `@modelcontextprotocol/inspector` in CLI mode (`mcp-inspector --cli`) lists and calls tools
 *   over `serve --stdio`, on the Node running these tests.
 * Nothing is installed here: scripts/install-test-tools.sh puts the pinned versions
 * (scripts/test-tools/package.json) into .tensorgate/tools; without them these tests are skipped.
 */

const CLI = join(ROOT, 'bin', 'tensorgate.js');
const TOOLS = join(ROOT, '.tensorgate', 'tools', 'node_modules');
const PINS = join(ROOT, 'scripts', 'test-tools', 'package.json');
const SETUP_HINT = 'run `bash scripts/install-test-tools.sh` (or scripts/setup.sh --test) to install them';
const FIXTURE_MODEL = 'tabular-classifier';
const SCENARIOS = ['server-initialize', 'ping', 'tools-list', 'resources-list', 'dns-rebinding-protection'];

interface Tool {
  /** absolute path of the package's bin script */
  bin: string;
  version: string;
}

/** Finds an installed tool at the pinned version; returns why not when it is absent or differs. */
function findTool(name: string, binName: string): Tool | string {
  const pinned = (JSON.parse(readFileSync(PINS, 'utf8')) as { dependencies: Record<string, string> }).dependencies[
    name
  ];
  const pkgFile = join(TOOLS, name, 'package.json');
  if (!existsSync(pkgFile)) return `${name}@${pinned} is not installed in .tensorgate/tools; ${SETUP_HINT}`;
  const pkg = JSON.parse(readFileSync(pkgFile, 'utf8')) as { version: string; bin: string | Record<string, string> };
  if (pkg.version !== pinned) {
    return `.tensorgate/tools has ${name}@${pkg.version}, the tests pin ${pinned}; ${SETUP_HINT}`;
  }
  const rel = typeof pkg.bin === 'string' ? pkg.bin : pkg.bin[binName];
  const bin = rel ? join(TOOLS, name, rel) : '';
  if (!rel || !existsSync(bin)) return `${name}@${pinned} has no "${binName}" program; ${SETUP_HINT}`;
  return { bin, version: pkg.version };
}

const node22 = findTool('node', 'node');
const conformance = findTool('@modelcontextprotocol/conformance', 'conformance');
const inspector = findTool('@modelcontextprotocol/inspector', 'mcp-inspector');
const skipReason = (...tools: (Tool | string)[]): string | false =>
  tools.find((t): t is string => typeof t === 'string') ?? false;

/**
 * A model repository holding only the fixture model, copied from the test models: the server
 * loads every model of its repository at start (a torch worker each), and on a small machine eight
 * workers importing torch slow every checker run down; the inspector starts a fresh server per call.
 */
function oneModelRepo(workDir: string): string {
  const repo = join(workDir, 'models');
  cpSync(join(ensureTestModels(), FIXTURE_MODEL), join(repo, FIXTURE_MODEL), { recursive: true });
  return repo;
}

interface Ran {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a program to its end (killed after timeoutMs), capturing its output. */
function run(command: string, args: string[], timeoutMs: number, env: NodeJS.ProcessEnv = process.env): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: stripVTControlCharacters(stdout), stderr: stripVTControlCharacters(stderr) });
    });
  });
}

const show = (r: Ran): string =>
  `exit ${r.code ?? r.signal}\n--- stdout ---\n${r.stdout.slice(-6000)}\n--- stderr ---\n${r.stderr.slice(-3000)}`;

interface Check {
  id: string;
  name: string;
  description: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO' | string;
  errorMessage?: string;
  details?: unknown;
}

describe('MCP conformance server scenarios (@modelcontextprotocol/conformance) over Streamable HTTP', {
  skip: skipReason(conformance, node22),
  timeout: 300_000,
}, () => {
  let workDir: string;
  let server: ChildProcess;
  let url: string;

  before(async () => {
    workDir = mkdtempSync(join(tmpdir(), 'tensorgate-conformance-'));
    server = spawn(
      process.execPath,
      [CLI, '--models', oneModelRepo(workDir), '--registry', join(workDir, 'registry.db'), 'serve', '--http', '0'],
      { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    url = await waitForUrl(server);
  });

  after(async () => {
    if (server && server.exitCode === null && server.signalCode === null) {
      const exited = new Promise((r) => server.once('exit', r));
      server.kill('SIGTERM');
      await exited;
    }
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  for (const scenario of SCENARIOS) {
    it(scenario, async () => {
      const { bin } = conformance as Tool;
      const outDir = join(workDir, 'results', scenario);
      mkdirSync(outDir, { recursive: true });
      // `conformance server --scenario S` exits 1 when a check has status FAILURE, 0 otherwise, and
      // with -o writes every check to OUT/server-S-<time>/checks.json.
      const ran = await run(
        (node22 as Tool).bin,
        [bin, 'server', '--url', url, '--scenario', scenario, '-o', outDir],
        120_000,
      );
      const dirs = readdirSync(outDir).filter((d) => d.startsWith(`server-${scenario}-`));
      assert.equal(dirs.length, 1, `the checker wrote no results for ${scenario}:\n${show(ran)}`);
      const checks = JSON.parse(readFileSync(join(outDir, dirs[0] as string, 'checks.json'), 'utf8')) as Check[];
      const bad = checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING');
      assert.deepEqual(
        bad.map((c) => ({ id: c.id, status: c.status, error: c.errorMessage, details: c.details })),
        [],
        `${scenario}: checks that did not pass:\n${show(ran)}`,
      );
      assert.ok(
        checks.some((c) => c.status === 'SUCCESS'),
        `${scenario}: no check succeeded (${checks.length} checks):\n${show(ran)}`,
      );
      assert.equal(ran.code, 0, `${scenario}: the checker did not exit 0:\n${show(ran)}`);
      assert.match(ran.stdout, /Passed: (\d+)\/\1, 0 failed/, show(ran));
    });
  }
});

interface ToolResult {
  content: { type: string; text?: string; uri?: string; mimeType?: string }[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
  _meta?: Record<string, unknown>;
}

interface InferResult {
  request_id: string;
  model: string;
  version: string;
  outputs: {
    name: string;
    dtype: string;
    shape: number[];
    uri: string;
    summary: { top?: { row: number; top: { label: string; index: number; score: number }[] }[] };
  }[];
  timings: Record<string, number>;
}

describe('MCP Inspector CLI (mcp-inspector --cli) over stdio', {
  skip: skipReason(inspector),
  timeout: 300_000,
}, () => {
  let workDir: string;
  let server: string[];
  // The inspector starts `node` from PATH for its CLI half: put the Node running these tests first.
  const env = { ...process.env, PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}` };
  const features = JSON.stringify({ features: [[5.0, 3.4, 1.5, 0.2]] });

  before(() => {
    workDir = mkdtempSync(join(tmpdir(), 'tensorgate-inspector-'));
    server = [
      CLI,
      '--models',
      oneModelRepo(workDir),
      '--registry',
      join(workDir, 'registry.db'),
      '--allow-root',
      workDir,
      'serve',
      '--stdio',
    ];
  });

  after(() => {
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  /** `mcp-inspector --cli SERVER... -- ARGS...`; returns the JSON it prints. */
  async function inspect(serverCommand: string[], args: string[]): Promise<unknown> {
    const ran = await run(
      process.execPath,
      [(inspector as Tool).bin, '--cli', ...serverCommand, '--', ...args],
      120_000,
      env,
    );
    assert.equal(ran.code, 0, `mcp-inspector failed:\n${show(ran)}`);
    try {
      return JSON.parse(ran.stdout);
    } catch {
      assert.fail(`mcp-inspector printed no JSON:\n${show(ran)}`);
    }
  }

  const callTool = async (serverCommand: string[], name: string, toolArgs: string[]): Promise<ToolResult> =>
    (await inspect(serverCommand, [
      '--method',
      'tools/call',
      '--tool-name',
      name,
      ...toolArgs.flatMap((a) => ['--tool-arg', a]),
    ])) as ToolResult;

  const errorText = (r: ToolResult): string => `isError with: ${r.content.map((c) => c.text).join('\n')}`;

  function assertInferStructure(result: ToolResult): void {
    assert.notEqual(result.isError, true, errorText(result));
    const s = result.structuredContent as unknown as InferResult;
    assert.equal(s.model, FIXTURE_MODEL);
    assert.equal(s.version, '1');
    assert.equal(typeof s.request_id, 'string');
    assert.equal(s.outputs.length, 1);
    const [out] = s.outputs;
    assert.ok(out);
    assert.equal(out.name, 'probabilities');
    assert.equal(out.dtype, 'float32');
    assert.deepEqual(out.shape, [1, 3]);
    assert.match(out.uri, /^tensor:\/\/\S+$/);
    const top = out.summary.top?.[0];
    assert.equal(top?.row, 0);
    assert.deepEqual(top?.top.map((t) => t.label).sort(), ['setosa', 'versicolor', 'virginica']);
    assert.equal(top?.top[0]?.label, 'setosa', 'a textbook setosa flower');
    const sum = (top?.top ?? []).reduce((a, t) => a + t.score, 0);
    assert.ok(Math.abs(sum - 1) < 1e-4, `probabilities sum to ${sum}`);
    assert.equal(typeof s.timings.total_ms, 'number');
    const text = result.content.find((c) => c.type === 'text');
    assert.match(text?.text ?? '', /setosa/);
    const link = result.content.find((c) => c.type === 'resource_link');
    assert.equal(link?.uri, out.uri);
    assert.equal(link?.mimeType, 'application/x-npy');
  }

  it('tools/list', async () => {
    const { tools } = (await inspect([process.execPath, ...server], ['--method', 'tools/list'])) as {
      tools: { name: string; description?: string; inputSchema: { type: string; required?: string[] } }[];
    };
    const names = tools.map((t) => t.name);
    for (const name of ['list_models', 'describe_model', 'infer']) assert.ok(names.includes(name), `${names}`);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, 'object', t.name);
      assert.ok(t.description, `${t.name} has a description`);
    }
    const infer = tools.find((t) => t.name === 'infer');
    assert.deepEqual([...(infer?.inputSchema.required ?? [])].sort(), ['inputs', 'model']);
  });

  it('tools/call list_models', async () => {
    const result = await callTool([process.execPath, ...server], 'list_models', []);
    assert.notEqual(result.isError, true, errorText(result));
    assert.equal(result.content[0]?.type, 'text');
    assert.match(result.content[0]?.text ?? '', new RegExp(FIXTURE_MODEL));
    const { models } = result.structuredContent as {
      models: { name: string; default_version: string; versions: { version: string; state: string }[] }[];
    };
    assert.deepEqual(
      models.map((m) => m.name),
      [FIXTURE_MODEL],
    );
    assert.equal(models[0]?.default_version, '1');
    // Version 1 is the .pt2 program, version 2 the same weights as eager code.
    assert.deepEqual(
      models[0]?.versions.map((v) => v.version),
      ['1', '2'],
    );
    assert.equal(typeof models[0]?.versions[0]?.state, 'string');
  });

  it(`tools/call infer ${FIXTURE_MODEL} on a server the call itself started`, async () => {
    // The call arrives while the model still loads: it waits in the model's queue.
    const result = await callTool([process.execPath, ...server], 'infer', [
      `model=${FIXTURE_MODEL}`,
      `inputs=${features}`,
    ]);
    assertInferStructure(result);
  });
});
