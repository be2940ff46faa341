import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { ORT_TYPES } from '../engines/onnx/ort-types.js';
import { tgError } from '../errors.js';
import { configText, parseModelConfig, type TensorSpec } from '../registry/model-config.js';
import { DTYPES, type DType } from '../tensor/dtype.js';
import { type JobResult, runPythonJob } from './python-job.js';

/**
 * `tensorgate init FILE`: a config.json written from what a model file declares, as Triton's
 * auto-complete does. A torch.export program (.pt2) and an ONNX graph declare their inputs and
 * outputs (names, dtypes, shapes with dynamic dimensions as -1); TorchScript, eager code (with
 * `--entry`) and AOTInductor packages do not, so they take `--input NAME=DTYPE[SHAPE]` and are run
 * on examples of it to find their outputs. The config is ready to serve; labels on a class output
 * and a description are for the user to add.
 *
 * Where it goes: a FILE already in a version folder (`MODEL/1/model.pt2`) gets `MODEL/config.json`;
 * any other FILE is copied into a new model folder, `--out` (default `./models`) `/NAME/1/`, with
 * the Python files beside it when it is eager code.
 */

export interface InitOptions {
  name?: string;
  input?: string[];
  entry?: string;
  out?: string;
  force?: boolean;
}

interface Introspection extends JobResult {
  format: string;
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  max_batch_size?: number;
}

/** Rows of a batch when the file sets no bound: a start the user tunes with bench numbers. */
const DEFAULT_MAX_BATCH = 16;

export async function runInit(file: string, opts: InitOptions = {}): Promise<string> {
  const path = resolve(file);
  if (!existsSync(path) || !statSync(path).isFile()) throw tgError('INVALID_CONFIG', `${path} is not a model file`);
  const inputs = (opts.input ?? []).map(parseInputSpec);
  const found = extname(path) === '.onnx' ? await fromOnnx(path) : await fromTorch(path, inputs, opts.entry);

  const inVersionFolder = /^\d+$/.test(basename(dirname(path)));
  const version = inVersionFolder ? basename(dirname(path)) : '1';
  const name = modelName(
    opts.name ?? (inVersionFolder ? basename(dirname(dirname(path))) : basename(path, extname(path))),
  );
  const modelDir = inVersionFolder ? dirname(dirname(path)) : resolve(opts.out ?? 'models', name);
  const configPath = join(modelDir, 'config.json');
  if (existsSync(configPath) && !opts.force)
    throw tgError('INVALID_CONFIG', `${configPath} exists already; pass --force to write it again`);

  const batched = [...found.inputs, ...found.outputs].every((s) => s.shape[0] === -1);
  const config = {
    name,
    description: '',
    engine: found.format === 'onnx' ? 'onnx' : 'torch',
    default_version: version,
    inputs: found.inputs,
    outputs: found.outputs,
    parameters: { precision: ['fp32'] },
    resources: { device: 'cpu', threads: 1, instances: 1 },
    versions: {
      [version]: { format: found.format, file: basename(path), ...(opts.entry ? { entry: opts.entry } : {}) },
    },
    ...(batched
      ? {
          batching: {
            max_batch_size: Math.min(DEFAULT_MAX_BATCH, found.max_batch_size ?? DEFAULT_MAX_BATCH),
            max_queue_delay_us: 1000,
          },
        }
      : {}),
  };
  parseModelConfig(config, configPath); // what register will check, before anything is written
  if (!inVersionFolder) copyModel(path, join(modelDir, version), opts.entry !== undefined);
  writeFileSync(configPath, configText(config));
  const list = (specs: TensorSpec[]) => specs.map((s) => `${s.name} ${s.dtype}[${s.shape.join(', ')}]`).join(', ');
  process.stdout.write(
    `wrote ${configPath} (${found.format}): inputs ${list(found.inputs)}; outputs ${list(found.outputs)}\n` +
      '  add a description, and labels to an output of class scores, then: ' +
      `tensorgate register ${modelDir}\n`,
  );
  return modelDir;
}

/** The model file of a folder without config.json: the one file in its only version folder that declares itself. */
export function declaringModelFile(dir: string): string | undefined {
  const versions = readdirSync(dir).filter((d) => /^\d+$/.test(d) && statSync(join(dir, d)).isDirectory());
  if (versions.length !== 1) return undefined;
  const files = readdirSync(join(dir, versions[0] as string)).filter((f) => ['.pt2', '.onnx'].includes(extname(f)));
  return files.length === 1 ? join(dir, versions[0] as string, files[0] as string) : undefined;
}

/** `image=float32[-1,3,224,224]` */
export function parseInputSpec(text: string): TensorSpec {
  const match = /^([A-Za-z_][\w.:-]*)=([a-z0-9]+)\[(-?\d+(?:\s*,\s*-?\d+)*)?\]$/.exec(text.replace(/\s+/g, ''));
  if (!match || !DTYPES.includes(match[2] as DType))
    throw tgError(
      'BAD_PARAMETER',
      `--input ${text}: write NAME=DTYPE[SHAPE], e.g. image=float32[-1,3,224,224] (-1: dynamic; dtypes ${DTYPES.join(', ')})`,
      { parameter: 'input' },
    );
  const shape = match[3] ? match[3].split(',').map(Number) : [];
  return { name: match[1] as string, dtype: match[2] as DType, shape };
}

function modelName(raw: string): string {
  const name = raw
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .replace(/^[^a-z0-9]+/, '');
  if (!name) throw tgError('BAD_PARAMETER', `cannot make a model name of "${raw}": give --name`, { parameter: 'name' });
  return name;
}

function copyModel(file: string, versionDir: string, eager: boolean): void {
  mkdirSync(versionDir, { recursive: true });
  copyFileSync(file, join(versionDir, basename(file)));
  // Eager code is imported from the version folder: bring the modules that sit beside the weights.
  if (eager)
    for (const f of readdirSync(dirname(file)).filter((f) => f.endsWith('.py')))
      copyFileSync(join(dirname(file), f), join(versionDir, f));
}

async function fromTorch(file: string, inputs: TensorSpec[], entry: string | undefined): Promise<Introspection> {
  const { result, cleanup } = await runPythonJob<Introspection>(
    'introspect',
    () => ({ file, inputs, ...(entry ? { entry } : {}) }),
    `cannot read ${basename(file)}`,
    'INVALID_CONFIG',
  );
  cleanup();
  return result;
}

/** ONNX Runtime's element type names back to tensorgate's dtypes. */
const ORT_DTYPES = new Map(Object.entries(ORT_TYPES).map(([dtype, ort]) => [ort as string, dtype as DType]));

async function fromOnnx(file: string): Promise<Introspection> {
  const ort = await import('onnxruntime-node');
  let session: Awaited<ReturnType<typeof ort.InferenceSession.create>>;
  try {
    session = await ort.InferenceSession.create(file);
  } catch (err) {
    throw tgError(
      'INVALID_CONFIG',
      `${basename(file)} is not an ONNX graph ONNX Runtime loads: ${(err as Error).message}`,
    );
  }
  try {
    const specs = (metadata: typeof session.inputMetadata): TensorSpec[] =>
      metadata.map((m) => {
        const dtype = m.isTensor ? ORT_DTYPES.get(m.type) : undefined;
        if (!m.isTensor || !dtype)
          throw tgError(
            'INVALID_CONFIG',
            `"${m.name}" of ${basename(file)} is ${m.isTensor ? m.type : 'not a tensor'}; tensorgate carries ${[...ORT_DTYPES.keys()].join(', ')}`,
          );
        return { name: m.name, dtype, shape: m.shape.map((d) => (typeof d === 'number' && d >= 0 ? d : -1)) };
      });
    return { ok: true, format: 'onnx', inputs: specs(session.inputMetadata), outputs: specs(session.outputMetadata) };
  } finally {
    await session.release();
  }
}
