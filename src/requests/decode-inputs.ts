import { closeSync } from 'node:fs';
import { extname } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { GatewayConfig } from '../config.js';
import type { NamedInput } from '../engines/engine.js';
import { tgError } from '../errors.js';
import type { TensorSpec } from '../registry/model-config.js';
import { openAllowedFile } from '../security/confined-files.js';
import { base64Source } from '../tensor/base64.js';
import { isDType } from '../tensor/dtype.js';
import { fromNestedArray } from '../tensor/nested.js';
import { reshapeSource, type TensorSource, tensorSource } from '../tensor/source.js';
import { TENSOR_URI_PREFIX, type TensorStore } from '../tensor/store.js';
import { npyFileSource, safetensorsFileSource } from '../tensor/tensor-file.js';
import { TENSOR_INPUT_FORMS } from './inference-request.js';

/**
 * Turns the loosely typed inputs of an inference request into tensors that match the model's
 * declared specs: every form is decoded once into raw bytes, then dtype and shape are checked.
 * Every failure names the input, says what was expected, and says how to fix the call.
 */

/** How an input arrived; `text`: a string for a model's text processing. */
export type InputForm = 'array' | 'b64' | 'path' | 'handle' | 'binary' | 'text';

export interface DecodedInput extends NamedInput {
  form: InputForm;
  decodeMs: number;
}

export interface DecodeContext {
  config: Pick<GatewayConfig, 'allowedRoots' | 'maxArrayElements' | 'maxInputBytes'>;
  store: TensorStore;
}

export function decodeInputs(specs: TensorSpec[], inputs: Record<string, unknown>, ctx: DecodeContext): DecodedInput[] {
  return checkedInputs(specs, Object.keys(inputs), (spec) => decodeOne(spec, inputs[spec.name], ctx));
}

/**
 * Inputs an adapter has already decoded (OIP v2 JSON data or binary body slices): the same name,
 * dtype and shape checks as every other form, so each error reads the same whichever way in.
 */
export function preparedInputs(
  specs: TensorSpec[],
  inputs: Map<string, TensorSource>,
  form: InputForm,
): DecodedInput[] {
  return checkedInputs(specs, [...inputs.keys()], (spec) => {
    const tensor = inputs.get(spec.name) as TensorSource;
    if (tensor.bytes)
      throw tgError(
        'BAD_TENSOR',
        `input "${spec.name}" is BYTES, but this model takes ${spec.dtype} tensors; BYTES (image files) go to models with processing`,
        { input: spec.name },
      );
    return { form, tensor };
  });
}

function checkedInputs(
  specs: TensorSpec[],
  given: string[],
  decode: (spec: TensorSpec) => { form: InputForm; tensor: TensorSource },
): DecodedInput[] {
  const declared = new Set(specs.map((s) => s.name));
  for (const name of given) {
    if (!declared.has(name)) {
      throw tgError('UNKNOWN_INPUT', `input "${name}" is not declared by this model; it takes ${listSpecs(specs)}`, {
        input: name,
        expected: [...declared],
      });
    }
  }
  const present = new Set(given);
  return specs.map((spec) => {
    if (!present.has(spec.name)) {
      throw tgError('MISSING_INPUT', `input "${spec.name}" is missing; this model takes ${listSpecs(specs)}`, {
        input: spec.name,
      });
    }
    const start = performance.now();
    const { form, tensor } = decode(spec);
    const checked = conformToSpec(spec, namedFill(tensor, spec.name));
    return { name: spec.name, tensor: checked, form, decodeMs: performance.now() - start };
  });
}

function decodeOne(spec: TensorSpec, value: unknown, ctx: DecodeContext): { form: InputForm; tensor: TensorSource } {
  if (Array.isArray(value) || typeof value === 'number' || typeof value === 'boolean') {
    const tensor = fromNestedArray(value, spec.dtype, { maxElements: ctx.config.maxArrayElements });
    return { form: 'array', tensor: tensorSource(tensor) };
  }
  if (typeof value === 'string') {
    return value.startsWith(TENSOR_URI_PREFIX)
      ? { form: 'handle', tensor: tensorSource(ctx.store.get(value).tensor) }
      : { form: 'path', tensor: readTensorFile(spec, value, undefined, ctx) };
  }
  if (value !== null && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    if (typeof obj.b64 === 'string') return { form: 'b64', tensor: decodeInline(spec, obj, ctx) };
    if (typeof obj.path === 'string') {
      const key = typeof obj.key === 'string' ? obj.key : undefined;
      return { form: 'path', tensor: readTensorFile(spec, obj.path, key, ctx) };
    }
    if (typeof obj.handle === 'string')
      return { form: 'handle', tensor: tensorSource(ctx.store.get(obj.handle).tensor) };
  }
  throw tgError('BAD_TENSOR', `input "${spec.name}" has an unrecognised form. ${TENSOR_INPUT_FORMS}`, {
    input: spec.name,
  });
}

function decodeInline(spec: TensorSpec, obj: Record<string, unknown>, ctx: DecodeContext): TensorSource {
  const dtype = obj.dtype ?? spec.dtype;
  if (typeof dtype !== 'string' || !isDType(dtype)) {
    throw tgError('BAD_TENSOR', `input "${spec.name}": dtype ${JSON.stringify(dtype)} is not a known dtype`, {
      input: spec.name,
    });
  }
  const shape = obj.shape;
  if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && (d as number) >= 0)) {
    throw tgError(
      'BAD_TENSOR',
      `input "${spec.name}": b64 data needs "shape", a list of non-negative integers such as ${JSON.stringify(exampleShape(spec))}`,
      { input: spec.name },
    );
  }
  try {
    return base64Source(dtype, shape as number[], obj.b64 as string, { maxBytes: ctx.config.maxInputBytes });
  } catch (err) {
    throw withInputName(err, spec.name);
  }
}

function readTensorFile(spec: TensorSpec, path: string, key: string | undefined, ctx: DecodeContext): TensorSource {
  const { file, fd } = openAllowedFile(spec.name, path, ctx.config.allowedRoots);
  try {
    if (file.size > ctx.config.maxInputBytes) {
      throw tgError(
        'INPUT_TOO_LARGE',
        `input "${spec.name}": ${path} is ${file.size} bytes, over the ${ctx.config.maxInputBytes}-byte limit`,
        { input: spec.name, bytes: file.size, limit: ctx.config.maxInputBytes },
      );
    }
    const ext = extname(file.path).toLowerCase();
    try {
      // .npy: the header is checked now, the data read later straight into shared memory.
      if (ext === '.npy') return npyFileSource(file, fd);
      // .safetensors: the header is checked now, the chosen tensor's bytes read later as .npy's are.
      if (ext === '.safetensors')
        return safetensorsFileSource(file, fd, (names) => pickSafetensor(spec, names, key, path));
    } catch (err) {
      throw withInputName(err, spec.name);
    }
    throw tgError('BAD_TENSOR', `input "${spec.name}": ${path} is neither .npy nor .safetensors`, { input: spec.name });
  } finally {
    closeSync(fd);
  }
}

/** Which of a .safetensors file's tensors an input takes: `key`, the only one, or the input's name. */
function pickSafetensor(spec: TensorSpec, names: string[], key: string | undefined, path: string): string {
  const wanted = key ?? (names.length === 1 ? (names[0] as string) : spec.name);
  if (!names.includes(wanted)) {
    throw tgError(
      'BAD_TENSOR',
      `input "${spec.name}": ${path} has no tensor "${wanted}"; it holds ${names.join(', ')}. Pass "key" to choose one`,
      { input: spec.name, keys: names },
    );
  }
  return wanted;
}

/** Checks dtype and shape against the declared spec; adds a missing dynamic batch dimension. */
function conformToSpec(spec: TensorSpec, tensor: TensorSource): TensorSource {
  if (tensor.dtype !== spec.dtype) {
    throw tgError(
      'DTYPE_MISMATCH',
      `input "${spec.name}" is ${tensor.dtype} but the model takes ${spec.dtype}; convert it (e.g. numpy .astype("${spec.dtype}")) or send a nested array`,
      { input: spec.name, expected: spec.dtype, got: tensor.dtype },
    );
  }
  let shape = tensor.shape;
  if (shape.length === spec.shape.length - 1 && spec.shape[0] === -1) shape = [1, ...shape];
  const matches = shape.length === spec.shape.length && spec.shape.every((d, i) => d === -1 || d === shape[i]);
  if (!matches) {
    throw tgError(
      'SHAPE_MISMATCH',
      `input "${spec.name}" has shape [${tensor.shape.join(', ')}] but the model takes [${spec.shape.join(', ')}] (-1 = any size)`,
      { input: spec.name, expected: spec.shape, got: tensor.shape },
    );
  }
  return shape === tensor.shape ? tensor : reshapeSource(tensor, shape);
}

/** Errors found only when the bytes are decoded (a stray base64 character) still name the input. */
function namedFill(source: TensorSource, input: string): TensorSource {
  if (source.data) return source;
  const file = source.file;
  return {
    ...source,
    ...(file && !file.what.includes(`"${input}"`) ? { file: { ...file, what: `input "${input}": ${file.what}` } } : {}),
    fill(target) {
      try {
        source.fill(target);
      } catch (err) {
        throw withInputName(err, input);
      }
    },
  };
}

function withInputName(err: unknown, input: string): unknown {
  if (err instanceof Error && 'code' in err && !err.message.includes(`"${input}"`)) {
    err.message = `input "${input}": ${err.message}`;
    (err as { data?: Record<string, unknown> }).data = { ...(err as { data?: object }).data, input };
  }
  return err;
}

function listSpecs(specs: TensorSpec[]): string {
  return specs.map((s) => `"${s.name}" ${s.dtype}[${s.shape.join(', ')}]`).join(', ');
}

function exampleShape(spec: TensorSpec): number[] {
  return spec.shape.map((d) => (d < 0 ? 1 : d));
}
