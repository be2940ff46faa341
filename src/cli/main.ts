import { Command, InvalidArgumentError, Option } from 'commander';
import { LOG_FORMATS, LOG_LEVELS } from '../observability/logger.js';
import { VERSION } from '../version.js';
import { runEncryptModel } from './encrypt-model.js';
import { type ExportFormat, runExport } from './export.js';
import { runInfer } from './infer.js';
import { runInit } from './init.js';
import { DEFAULT_KEYS_FILE, runKeysCreate, runKeysList, runKeysRevoke } from './keys.js';
import { configureLogging } from './logs.js';
import { runModels } from './models.js';
import { runRegister } from './register.js';
import { callServerTool, DEFAULT_URL } from './remote.js';
import { runServe } from './serve.js';
import { runTop } from './top.js';

/** The tensorgate command line. Each command lives in its own file; this one only wires them up. */

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('a port is an integer 0-65535');
  return n;
}

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('a positive number');
  return n;
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('a positive integer');
  return n;
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

const program = new Command()
  .name('tensorgate')
  .description('Serve PyTorch models to AI agents over MCP, with tensors moved as raw bytes.')
  .version(VERSION)
  // Global options go before the command, so commands may reuse names such as --version.
  .enablePositionalOptions()
  .option('--models <dir>', 'model repository folder', 'models')
  .addOption(
    new Option('--registry <file|url>', 'registry: a SQLite file, or a postgres:// URL several replicas share')
      .env('TENSORGATE_REGISTRY')
      .default('.tensorgate/registry.db'),
  )
  .addOption(
    new Option(
      '--replica-id <name>',
      "this replica's name on a shared registry; names its tensor:// handles (default: the host name)",
    ).env('TENSORGATE_REPLICA_ID'),
  )
  .option('--allow-root <dir>', 'folder tensor file inputs may be read from (repeatable; default: cwd)', collect, [])
  .option('--runs-dir <dir>', 'training runs directory (default: $TENSORGATE_RUNS_DIR or /dev/shm/tensorgate-runs)')
  .option('--audit-log <file>', 'append-only audit log of changes', '.tensorgate/audit.jsonl')
  .option(
    '--cache-dir <dir>',
    'compiled variants (AOTInductor packages) kept across restarts (default: $TENSORGATE_CACHE_DIR or .tensorgate/cache)',
  )
  .addOption(new Option('--log-level <level>', 'least severe log records written').choices(LOG_LEVELS).default('info'))
  .addOption(new Option('--log-format <format>', 'log record format on stderr').choices(LOG_FORMATS).default('json'))
  .hook('preAction', () => configureLogging(program.opts()));

program
  .command('serve')
  .description('register the models in the repository, warm them up, and serve them over MCP')
  .option('--stdio', 'serve MCP over stdin/stdout (for Claude Desktop, Claude Code, Cursor)')
  .option('--http <port>', 'serve MCP Streamable HTTP at http://HOST:PORT/mcp', port)
  .option('--grpc <port>', 'also serve OIP v2 gRPC (inference.GRPCInferenceService) on this port', port)
  .option(
    '--oip-port <port>',
    'also serve the OIP v2 data routes (infer, metadata, health) on this port, read by several threads',
    port,
  )
  .option('--oip-threads <n>', 'threads serving --oip-port (default: half the cores, 1 to 8)', positiveInt)
  .option('--host <host>', 'address to bind for --http, --grpc and --oip-port', '127.0.0.1')
  .option('--max-body-mb <n>', 'largest MCP request over HTTP, in MiB (inline tensors)', positive, 64)
  .option('--memory-budget-mb <n>', 'memory all loaded models may use (resources.memory_mb x instances)', positive)
  .option('--otlp-endpoint <url>', 'export OpenTelemetry spans over OTLP/HTTP to this collector (default: $OTEL_*)')
  .addOption(
    new Option('--auth <mode>', 'bearer auth on HTTP: auto = on unless bound to loopback with no credential configured')
      .choices(['auto', 'on', 'off'])
      .default('auto'),
  )
  .option('--api-keys <file>', 'API keys accepted (tensorgate keys create)', DEFAULT_KEYS_FILE)
  .option('--roles <file>', 'custom RBAC roles (JSON); admin, inference and monitor are built in')
  .option('--jwt-secret-file <file>', 'accept HS256 JWTs signed with this secret (or $TENSORGATE_JWT_SECRET)')
  .option('--jwks-url <url>', "accept JWTs signed by this identity provider's keys")
  .option('--jwt-issuer <url>', 'required iss of JWTs; advertised as the authorization server')
  .option('--jwt-audience <aud>', 'required aud of JWTs (default: the MCP URL)')
  .option('--tls-cert <file>', 'serve HTTPS with this certificate chain (PEM)')
  .option('--tls-key <file>', 'the private key of --tls-cert (PEM)')
  .addOption(
    new Option('--tls-min-version <v>', 'oldest TLS accepted').choices(['TLSv1.2', 'TLSv1.3']).default('TLSv1.3'),
  )
  .option(
    '--public-url <url>',
    'how clients reach this server (behind a proxy or by name): MCP resource URL, Host check',
  )
  .option('--allowed-host <name>', 'a host name requests may address besides localhost (repeatable)', collect, [])
  .option('--max-connections <n>', 'HTTP client connections served at once; more get 503', positiveInt, 4096)
  .option('--rate-limit <rps>', 'requests per second per API key, JWT subject or address (default: none)', positive)
  .option(
    '--rate-burst <n>',
    'requests a caller may send at once within its rate (default: the rate, at least 10)',
    positiveInt,
  )
  .addHelpText('after', '\nWith neither --stdio nor --http, serves HTTP on port 8765.')
  .action((opts) => runServe(program.opts(), opts));

const keys = program.command('keys').description('API keys for the HTTP surfaces (stored hashed; shown once)');
keys
  .command('create')
  .description('create a key and print it (once)')
  .requiredOption('--name <name>', 'who or what the key is for')
  .requiredOption(
    '--role <role>',
    'a role of the key: admin, inference, monitor or a custom one (repeatable)',
    collect,
    [],
  )
  .option('--rate-limit <rps>', "requests per second for this key (overrides serve's --rate-limit)", positive)
  .option('--file <file>', 'the key file', DEFAULT_KEYS_FILE)
  .action((opts) => runKeysCreate(program.opts(), opts));
keys
  .command('list')
  .description('list the keys (ids, names, roles; never the keys)')
  .option('--file <file>', 'the key file', DEFAULT_KEYS_FILE)
  .option('--json', 'print JSON')
  .action((opts) => runKeysList(opts));
keys
  .command('revoke')
  .description('revoke a key by id')
  .argument('<id>', 'the key id (tensorgate keys list)')
  .option('--file <file>', 'the key file', DEFAULT_KEYS_FILE)
  .action((id: string, opts) => runKeysRevoke(program.opts(), id, opts));

program
  .command('register')
  .description(
    'validate a model folder, load it in a worker, warm it up and record it in the registry; or check a workflow folder against the registered models and record it',
  )
  .argument(
    '<dir>',
    'model folder (config.json and version folders; without config.json, one is written from a .pt2 or .onnx file as `init` does) or workflow folder (workflow.json or .yaml)',
  )
  .option(
    '--export <format>',
    'onnx: export each PyTorch version to ONNX (VERSION/model.onnx, checked against PyTorch) as its onnx variant; aoti: compile each version with AOTInductor for its device as its fp32 variant (optimization.torch "aoti", cached)',
  )
  .option(
    '--tolerance <t>',
    "the ONNX export's check: largest error vs PyTorch, scaled to each output's range",
    positive,
    1e-4,
  )
  .action((dir: string, opts) => runRegister(program.opts(), dir, opts));

const exportCommand = (name: string, fixed?: ExportFormat) =>
  program
    .command(name)
    .description(
      fixed
        ? 'export one version of a PyTorch model folder to ONNX (the same as `export --format onnx`)'
        : "export one version of a PyTorch model folder (eager, TorchScript or .pt2) as a torch.export program, an AOTInductor package or ONNX, in a model folder of its own, checked against the original's outputs",
    )
    .argument('<dir>', 'the PyTorch model folder')
    .option('--version <v>', 'the version to export (default: the model default)')
    .option('--out <dir>', 'the new model folder (default: NAME-FORMAT beside DIR)')
    .option('--device <d>', "aoti: the device to compile for, cpu or cuda[:N] (default: the model's)")
    .option('--tolerance <t>', 'largest error allowed vs the original, scaled to each output', positive, 1e-4)
    .option('--register', 'register the new folder once it checks out')
    .action(async (dir: string, opts) => {
      const out = await runExport(dir, { ...opts, format: fixed ?? opts.format });
      if (opts.register) await runRegister(program.opts(), out);
      else process.stdout.write(`register it with: tensorgate register ${out}\n`);
    });
exportCommand('export').requiredOption(
  '--format <f>',
  'export (a torch.export .pt2 program), aoti (an AOTInductor package for --device) or onnx',
);
exportCommand('export-onnx', 'onnx');

program
  .command('init')
  .description(
    "write a model's config.json from its file: a .pt2 program's or an ONNX graph's declared inputs and outputs; TorchScript, eager code and AOTInductor packages from --input examples",
  )
  .argument('<file>', 'the model file (.pt2, .onnx, a TorchScript .pt, or a state_dict with --entry)')
  .option('--name <name>', 'the model name (default: from the folder or file name)')
  .option('-i, --input <name=dtype[shape]>', 'an input, e.g. image=float32[-1,3,224,224] (repeatable)', collect, [])
  .option('--entry <module:factory>', "eager code: the factory building the module, imported from the file's folder")
  .option('--out <dir>', 'where a new model folder goes when FILE is not in a version folder', 'models')
  .option('--force', 'write config.json even where one exists')
  .action(async (file: string, opts) => {
    await runInit(file, opts);
  });

for (const [command, tool, what] of [
  ['load', 'load_model', 'load a model version into a running server and wait until it is ready'],
  ['unload', 'unload_model', "stop a model's workers in a running server (it stays registered)"],
] as const) {
  program
    .command(command)
    .description(what)
    .argument('<model>', 'model name')
    .option('--version <v>', command === 'load' ? 'version (default: the model default)' : 'version (default: all)')
    .option('--url <url>', 'the server MCP endpoint', DEFAULT_URL)
    .action((model: string, opts: { version?: string; url: string }) =>
      callServerTool(opts.url, tool, { model, ...(opts.version ? { version: opts.version } : {}) }),
    );
}

const job = program
  .command('job')
  .description(
    "batch jobs in a running server: a model or workflow over a folder's files or a file's lines (docs/jobs.md)",
  );
job
  .command('start')
  .description('start a job and print its id; the answers go to RESULTS, one line per item (JSONL, CSV or Parquet)')
  .argument('<name>', 'a model with processing (or, with --workflow, a workflow taking files)')
  .option('--workflow', 'NAME is a workflow, run once per item')
  .requiredOption('--results <file>', 'the .jsonl, .csv or .parquet file to write (absolute, under an allowed root)')
  .option('--folder <dir>', "the folder's files are the items")
  .option('--pattern <glob>', 'with --folder: only files whose name matches, e.g. "*.jpg"')
  .option('--recursive', 'with --folder: files in subfolders too')
  .option('--lines <file>', 'each non-empty line of the file is a text item')
  .option('--files <file...>', 'these files are the items')
  .option('--table <file>', 'a .jsonl, .csv or .parquet file: the values of --column are the items, a row each')
  .option('--column <name>', 'with --table: the field or column holding the texts or file paths')
  .option('--rows <file>', 'a .npy or .safetensors file: each row is an item (a model that takes tensors)')
  .option('--tensor <name>', 'with --rows: the tensor of a .safetensors file holding several')
  .option('--version <v>', 'version (default: the model default)')
  .option('--batch <n>', 'items per request (default: the model batch size)', positiveInt)
  .option('--max-failures <n>', 'stop once more items than this have failed', Number)
  .option('--tensors', 'also write each output tensor as a .npy file beside RESULTS, row i = item i')
  .option('--overwrite', 'replace RESULTS if it exists')
  .option('--wait', 'print progress to stderr and the summary once the job stops, rather than at once')
  .option('--url <url>', 'the server MCP endpoint', DEFAULT_URL)
  .action((name: string, opts) => {
    const sources = [opts.folder, opts.lines, opts.files, opts.table, opts.rows].filter((x) => x !== undefined);
    if (sources.length !== 1)
      program.error('give the items with exactly one of --folder, --lines, --files, --table or --rows');
    if (opts.table !== undefined && opts.column === undefined) program.error('--table needs --column');
    if (opts.tensor !== undefined && opts.rows === undefined) program.error('--tensor goes with --rows');
    const items = opts.folder
      ? { folder: opts.folder, ...(opts.pattern ? { pattern: opts.pattern } : {}), recursive: Boolean(opts.recursive) }
      : opts.lines
        ? { lines: opts.lines }
        : opts.table
          ? { table: opts.table, column: opts.column }
          : opts.rows
            ? { rows: opts.rows, ...(opts.tensor ? { tensor: opts.tensor } : {}) }
            : { files: opts.files };
    return callServerTool(
      opts.url,
      'start_job',
      {
        ...(opts.workflow ? { workflow: name } : { model: name }),
        items,
        results: opts.results,
        ...(opts.version ? { version: opts.version } : {}),
        ...(opts.batch ? { batch: opts.batch } : {}),
        ...(opts.maxFailures !== undefined ? { max_failures: opts.maxFailures } : {}),
        ...(opts.tensors ? { tensors: 'npy' } : {}),
        ...(opts.overwrite ? { overwrite: true } : {}),
        ...(opts.wait ? { wait: true } : {}),
      },
      { progress: Boolean(opts.wait) },
    );
  });
for (const [command, tool, what] of [
  ['status', 'get_job', "a job's state and progress"],
  ['cancel', 'cancel_job', 'stop a running or paused job; the lines written so far stay'],
  ['resume', 'resume_job', 'run a paused job (DISK_FULL) on from its last commit'],
] as const)
  job
    .command(command)
    .description(what)
    .argument('<id>', 'the id `job start` printed')
    .option('--url <url>', 'the server MCP endpoint', DEFAULT_URL)
    .action((id: string, opts: { url: string }) => callServerTool(opts.url, tool, { id }));
job
  .command('list')
  .description('every recorded job, newest first')
  .option('--url <url>', 'the server MCP endpoint', DEFAULT_URL)
  .action((opts: { url: string }) => callServerTool(opts.url, 'list_jobs', {}));

program
  .command('encrypt-model')
  .description("encrypt a model folder's weight files at rest (AES-256-GCM with $TENSORGATE_MODEL_KEY)")
  .argument('<dir>', 'model folder holding config.json and version folders')
  .option('--version <v>', 'only this version (default: all)')
  .option('--keep-plaintext', 'keep the unencrypted files (default: removed once the encrypted one checks out)')
  .action((dir: string, opts) => runEncryptModel(program.opts(), dir, opts));

program
  .command('models')
  .description('list the registered models, their versions and the outcome of their last load')
  .option('--json', 'print JSON')
  .action((opts) => runModels(program.opts(), opts));

program
  .command('infer')
  .description('run a registered model once, in this process, and print the result')
  .argument('<model>', 'model name')
  .option('--version <v>', 'model version (default: the model default)')
  .option(
    '-i, --input <name=value>',
    'an input: name=/abs/file.npy, name=[[1,2,3,4]] (JSON), or name=@file.json (repeatable)',
    collect,
    [],
  )
  .option('--precision <p>', 'fp32, bf16, fp16 or int8, as the model offers')
  .option('--engine <e>', 'torch or onnx: run on this engine rather than the one chosen for the precision')
  .option('--json', 'print the full result as JSON')
  .action((model: string, opts) => runInfer(program.opts(), model, opts));

program
  .command('top')
  .description('watch a running server: per model version state, load, rates, latency and errors, live')
  .option('--url <url>', 'the server (http://HOST:PORT) or its MCP endpoint', DEFAULT_URL)
  .option('--window <s>', 'seconds of recent requests the figures cover', positive, 60)
  .option('--interval <s>', 'seconds between refreshes', positive, 1)
  .option('--once', 'print one plain frame and exit')
  .option('--json', 'print the server snapshot as JSON and exit')
  .action((opts) => runTop(opts));

program.parseAsync().catch((err: unknown) => {
  const e = err as { code?: string; message?: string };
  process.stderr.write(`tensorgate: ${e.code ? `${e.code}: ` : ''}${e.message ?? String(err)}\n`);
  process.exit(1);
});
