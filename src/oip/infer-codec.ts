import type { NamedTensor } from '../engines/engine.js';
import { tgError } from '../errors.js';
import type { TensorInferenceResult } from '../gateway.js';
import type { InferBody } from '../http/body.js';
import type { InputForm } from '../requests/decode-inputs.js';
import { bytesSource, serialisedBytesSource } from '../tensor/bytes-tensor.js';
import { fromNestedArray } from '../tensor/nested.js';
import { type OutputSink, type TensorSource, tensorSource } from '../tensor/source.js';
import { byteLength, checkShape, numel, toNumbers } from '../tensor/tensor.js';
import { dtypeOf, oipDatatype } from './datatypes.js';
import type { Region, SharedMemoryRegistry } from './shared-memory.js';

/**
 * The OIP v2 infer request and response, JSON and with the binary tensor data extension: a JSON
 * header of `Inference-Header-Content-Length` bytes, then each binary tensor's raw bytes in order.
 * Binary inputs stay views of the request body's chunks until the engine copies them into shared
 * memory: a tensor that arrived in several socket reads is never joined into one buffer first.
 */

export const HEADER_LENGTH = 'inference-header-content-length';

export interface RequestedOutput {
  name: string;
  binary: boolean;
  /**
   * Written into this shared-memory region instead of the response: by the worker, when it could
   * (`sink.written`), else when the response is encoded.
   */
  shm?: { region: Region; offset: number; size: number; sink?: OutputSink };
}

export interface OipInferRequest {
  id?: string;
  /** tensorgate's own parameters (precision, timeout_ms), picked out of the request's. */
  parameters: Record<string, unknown>;
  inputs: Map<string, TensorSource>;
  form: InputForm;
  /** The outputs asked for; null: every output, binary when `binary_data_output` says so. */
  outputs: RequestedOutput[] | null;
  binaryOutputs: boolean;
  /** Releases the shared-memory regions the request holds; call once it is answered. */
  release: () => void;
}

export interface DecodeContext {
  maxArrayElements: number;
  regions: SharedMemoryRegistry;
}

function invalid(message: string, data: Record<string, unknown> = {}) {
  return tgError('INVALID_REQUEST', message, data);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/**
 * A BYTES input (what a model with processing takes: image files): `shape` counts its elements;
 * binary data is already the serialisation the worker reads (4-byte little-endian length, then the
 * bytes, per element) and is checked, not copied; JSON `data` is a list of strings, sent on as
 * their UTF-8 bytes (the gateway reads each as a path, data: URI or base64, as over MCP).
 */
function bytesInput(
  name: string,
  input: Record<string, unknown>,
  body: InferBody,
  cursor: number,
): { source: TensorSource; consumed: number } {
  try {
    checkShape(input.shape);
  } catch (err) {
    throw tgError('BAD_TENSOR', `input "${name}": ${(err as Error).message}`, { input: name });
  }
  const count = numel(input.shape as number[]);
  const parameters = isObject(input.parameters) ? input.parameters : {};
  if (parameters.shared_memory_region !== undefined)
    throw tgError(
      'BAD_TENSOR',
      `input "${name}": BYTES inputs travel in the body (JSON or binary), not in shared memory`,
      {
        input: name,
      },
    );
  const size = parameters.binary_data_size;
  if (size !== undefined) {
    if (input.data !== undefined) throw invalid(`input "${name}" has both "data" and binary_data_size`);
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0 || cursor + size > body.length)
      throw invalid(`input "${name}": binary_data_size must be a byte count within the body`, { input: name });
    return { source: serialisedBytesSource(name, body.slice(cursor, cursor + size), count), consumed: size };
  }
  const data = input.data;
  const strings = Array.isArray(data) ? data.flat(Number.POSITIVE_INFINITY) : [data];
  if (!strings.every((v): v is string => typeof v === 'string') || strings.length !== count)
    throw tgError(
      'BAD_TENSOR',
      `input "${name}": BYTES "data" must be ${count} string(s) (shape [${(input.shape as number[]).join(', ')}])`,
      { input: name },
    );
  return { source: bytesSource(strings.map((v) => Buffer.from(v, 'utf8'))), consumed: 0 };
}

/**
 * Where the JSON header ends in a body of `bodyLength` bytes: Inference-Header-Content-Length, or
 * the whole body without one; INVALID_REQUEST when it is not a byte count within the body.
 */
export function headerEnd(headerLength: string | string[] | undefined, bodyLength: number): number {
  if (headerLength === undefined) return bodyLength;
  const n = Number(headerLength);
  if (typeof headerLength !== 'string' || !Number.isSafeInteger(n) || n < 0)
    throw invalid(`Inference-Header-Content-Length ${JSON.stringify(headerLength)} is not a byte count`);
  if (n > bodyLength)
    throw invalid(`Inference-Header-Content-Length is ${n} but the body has only ${bodyLength} bytes`);
  return n;
}

export function parseInferRequest(
  body: InferBody,
  headerLength: string | string[] | undefined,
  ctx: DecodeContext,
): OipInferRequest {
  const releases: (() => void)[] = [];
  try {
    return parse(body, headerLength, ctx, releases);
  } catch (err) {
    for (const release of releases) release();
    throw err;
  }
}

/** The region a tensor's parameters name, held for the request; undefined when it names none. */
function regionOf(
  parameters: unknown,
  what: string,
  ctx: DecodeContext,
  releases: (() => void)[],
): { region: Region; offset: number; size: number } | undefined {
  if (!isObject(parameters) || parameters.shared_memory_region === undefined) return undefined;
  const { shared_memory_region: name, shared_memory_byte_size: size, shared_memory_offset: offset = 0 } = parameters;
  if (typeof name !== 'string') throw invalid(`${what}: shared_memory_region must be a region name`);
  if (typeof size !== 'number' || typeof offset !== 'number')
    throw invalid(`${what}: shared_memory_byte_size (and shared_memory_offset) must be byte counts`);
  const region = ctx.regions.get(name);
  releases.push(region.acquire());
  return { region, offset, size };
}

function parse(
  body: InferBody,
  headerLength: string | string[] | undefined,
  ctx: DecodeContext,
  releases: (() => void)[],
): OipInferRequest {
  const jsonEnd = headerEnd(headerLength, body.length);
  let json: unknown;
  try {
    json = JSON.parse(body.text(0, jsonEnd));
  } catch (err) {
    throw invalid(`the request is not valid JSON: ${(err as Error).message}`);
  }
  if (!isObject(json)) throw invalid('the request must be a JSON object with "inputs"');
  if (!Array.isArray(json.inputs) || json.inputs.length === 0)
    throw invalid('"inputs" must be a non-empty list of {name, shape, datatype, data}');
  const parameters = isObject(json.parameters) ? json.parameters : {};
  if (json.parameters !== undefined && !isObject(json.parameters)) throw invalid('"parameters" must be an object');

  const inputs = new Map<string, TensorSource>();
  let cursor = jsonEnd;
  let binary = false;
  for (const [i, input] of json.inputs.entries()) {
    if (!isObject(input) || typeof input.name !== 'string')
      throw invalid(`inputs[${i}] must be an object with a "name"`);
    const name = input.name;
    if (inputs.has(name)) throw invalid(`input "${name}" is given twice`);
    if (input.datatype === 'BYTES') {
      const bytes = bytesInput(name, input, body, cursor);
      cursor += bytes.consumed;
      binary ||= bytes.consumed > 0;
      inputs.set(name, bytes.source);
      continue;
    }
    const dtype = dtypeOf(input.datatype);
    if (typeof dtype === 'object')
      throw tgError('BAD_TENSOR', `input "${name}": ${dtype.reason}`, { input: name, datatype: input.datatype });
    try {
      checkShape(input.shape);
    } catch (err) {
      throw tgError('BAD_TENSOR', `input "${name}": ${(err as Error).message}`, { input: name });
    }
    const shape = input.shape as number[];
    const shm = regionOf(input.parameters, `input "${name}"`, ctx, releases);
    if (shm) {
      if (input.data !== undefined) throw invalid(`input "${name}" has both "data" and a shared-memory region`);
      inputs.set(name, shm.region.input(name, dtype, shape, shm.offset, shm.size));
      continue;
    }
    const size = isObject(input.parameters) ? input.parameters.binary_data_size : undefined;
    if (size !== undefined) {
      if (input.data !== undefined) throw invalid(`input "${name}" has both "data" and binary_data_size`);
      if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0)
        throw invalid(`input "${name}": binary_data_size must be a byte count`);
      if (cursor + size > body.length)
        throw invalid(
          `input "${name}": binary_data_size ${size} reaches past the end of the body (${body.length - cursor} bytes left)`,
          { input: name },
        );
      try {
        inputs.set(name, body.tensor(cursor, cursor + size, dtype, shape));
      } catch (err) {
        throw tgError('BYTE_LENGTH_MISMATCH', `input "${name}": ${(err as Error).message}`, { input: name });
      }
      cursor += size;
      binary = true;
      continue;
    }
    if (input.data === undefined)
      throw invalid(`input "${name}" has neither "data" nor parameters.binary_data_size`, { input: name });
    const elements = numel(shape);
    if (elements > ctx.maxArrayElements)
      throw tgError(
        'INPUT_TOO_LARGE',
        `input "${name}": ${elements} elements as JSON is over the ${ctx.maxArrayElements} limit; send it as binary data`,
        { input: name },
      );
    const tensor = fromNestedArray(input.data, dtype, { maxElements: ctx.maxArrayElements });
    if (numel(tensor.shape) !== elements)
      throw tgError(
        'BAD_TENSOR',
        `input "${name}": "data" holds ${numel(tensor.shape)} values but shape [${shape.join(', ')}] needs ${elements}`,
        { input: name },
      );
    inputs.set(name, tensorSource({ ...tensor, shape }));
  }
  if (cursor !== body.length)
    throw invalid(
      `the body has ${body.length - cursor} bytes after the last input's binary data; binary_data_size must account for every byte`,
    );

  let outputs: RequestedOutput[] | null = null;
  const binaryOutputs = parameters.binary_data_output === true;
  if (json.outputs !== undefined) {
    if (!Array.isArray(json.outputs)) throw invalid('"outputs" must be a list of {name, parameters}');
    outputs = json.outputs.map((output, i) => {
      if (!isObject(output) || typeof output.name !== 'string')
        throw invalid(`outputs[${i}] must be an object with a "name"`);
      const flag = isObject(output.parameters) ? output.parameters.binary_data : undefined;
      const region = regionOf(output.parameters, `output "${output.name}"`, ctx, releases);
      const shm = region && { ...region, sink: region.region.outputSink(output.name, region.offset, region.size) };
      return { name: output.name, binary: typeof flag === 'boolean' ? flag : binaryOutputs, ...(shm ? { shm } : {}) };
    });
  }
  return {
    ...(typeof json.id === 'string' ? { id: json.id } : {}),
    parameters: tensorgateParameters(parameters),
    inputs,
    form: binary ? 'binary' : 'array',
    outputs,
    binaryOutputs,
    release: () => {
      for (const release of releases.splice(0)) release();
    },
  };
}

/**
 * OIP parameters are open-ended (clients send their own, e.g. Triton's binary_data_output or
 * priority): keep tensorgate's and map Triton's `timeout` (µs); leave the rest to the protocol.
 */
export function tensorgateParameters(parameters: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (parameters.precision !== undefined) out.precision = parameters.precision;
  if (parameters.engine !== undefined) out.engine = parameters.engine;
  if (parameters.timeout_ms !== undefined) out.timeout_ms = parameters.timeout_ms;
  else if (typeof parameters.timeout === 'number' && parameters.timeout > 0)
    out.timeout_ms = Math.max(1, Math.round(parameters.timeout / 1000));
  return out;
}

export interface EncodedResponse {
  headers: Record<string, string | number>;
  /** The body in order: one buffer, or the JSON header and then each large binary output. */
  parts: Uint8Array[];
  /** The body's length in bytes (the parts' together). */
  length: number;
}

/**
 * Binary outputs up to this many bytes in all are joined with the header into one buffer (one
 * write); larger ones are written as they are, after it, in one writev: joining them would copy
 * them into a fresh allocation (page faults, and external memory the GC must account for).
 */
const JOIN_TAILS_UP_TO = 64 * 1024;

/** The response: JSON, or a JSON header followed by the binary outputs in order. */
export function encodeInferResponse(
  result: TensorInferenceResult,
  request: Pick<OipInferRequest, 'id' | 'outputs' | 'binaryOutputs'>,
  extraParameters: Record<string, number | string | boolean>,
): EncodedResponse {
  const byName = new Map<string, NamedTensor>(result.outputs.map((o) => [o.name, o]));
  const wanted: RequestedOutput[] =
    request.outputs ?? result.outputs.map((o) => ({ name: o.name, binary: request.binaryOutputs }));
  const tails: Uint8Array[] = [];
  const outputs = wanted.map((output) => {
    const { name, binary } = output;
    const { tensor, written } = byName.get(name) as NamedTensor;
    const head = { name, datatype: oipDatatype(tensor.dtype), shape: tensor.shape };
    if (output.shm) {
      const { region, offset, size, sink } = output.shm;
      if (!sink?.written) region.writeOutput(name, tensor, offset, size);
      return {
        ...head,
        parameters: {
          shared_memory_region: region.name,
          shared_memory_byte_size: written ? byteLength(tensor.dtype, tensor.shape) : tensor.data.byteLength,
          shared_memory_offset: offset,
        },
      };
    }
    if (binary) {
      tails.push(tensor.data);
      return { ...head, parameters: { binary_data_size: tensor.data.byteLength } };
    }
    const values = toNumbers(tensor);
    return { ...head, data: tensor.dtype === 'bool' ? Array.from(values, (v) => v !== 0) : Array.from(values) };
  });
  const json = Buffer.from(
    JSON.stringify({
      model_name: result.model,
      model_version: result.version,
      ...(request.id !== undefined ? { id: request.id } : {}),
      parameters: extraParameters,
      outputs,
    }),
  );
  if (tails.length === 0)
    return { headers: { 'content-type': 'application/json' }, parts: [json], length: json.length };
  const length = tails.reduce((sum, tail) => sum + tail.byteLength, json.length);
  return {
    headers: { 'content-type': 'application/octet-stream', [HEADER_LENGTH]: json.length },
    parts: length - json.length <= JOIN_TAILS_UP_TO ? [Buffer.concat([json, ...tails], length)] : [json, ...tails],
    length,
  };
}
