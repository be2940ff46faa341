import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { asTensorgateError, type ErrorCode, tgError } from '../errors.js';
import type { Gateway, TensorInferenceResult } from '../gateway.js';
import type { Authenticator } from '../security/auth.js';
import type { RateLimiter } from '../security/rate-limit.js';
import { bytesSource, serialisedBytesSource } from '../tensor/bytes-tensor.js';
import type { DType } from '../tensor/dtype.js';
import { fromNestedArray } from '../tensor/nested.js';
import { type TensorSource, tensorSource } from '../tensor/source.js';
import { checkShape, makeTensor, numel } from '../tensor/tensor.js';
import { checkWorkflowAccess } from '../workflows/run-workflow.js';
import { dtypeOf, oipDatatype } from './datatypes.js';
import { tensorgateParameters } from './infer-codec.js';
import {
  checkOutputs,
  checkWorkflowOutputs,
  inferWorkflow,
  isWorkflow,
  kindOf,
  modelMetadata,
  modelReady,
  repositoryIndex,
  serverMetadata,
  serverReady,
  workflowMetadata,
  workflowReady,
} from './service.js';

/**
 * Open Inference Protocol v2 over gRPC: `inference.GRPCInferenceService` (proto/grpc_service.proto)
 * on @grpc/grpc-js, answering what the REST routes answer (src/oip/service.ts). Tensors travel as
 * `raw_input_contents` / `raw_output_contents` (raw little-endian bytes, what tritonclient sends)
 * or as typed `contents`; errors are gRPC statuses whose details start with the tensorgate code.
 */

const PROTO = resolve(dirname(fileURLToPath(import.meta.url)), '../../proto/grpc_service.proto');

/** HTTP statuses of tensorgate codes as gRPC status codes. */
const GRPC_STATUS: Record<number, grpc.status> = {
  400: grpc.status.INVALID_ARGUMENT,
  401: grpc.status.UNAUTHENTICATED,
  403: grpc.status.PERMISSION_DENIED,
  404: grpc.status.NOT_FOUND,
  409: grpc.status.FAILED_PRECONDITION,
  413: grpc.status.RESOURCE_EXHAUSTED,
  422: grpc.status.INVALID_ARGUMENT,
  429: grpc.status.RESOURCE_EXHAUSTED,
  499: grpc.status.CANCELLED,
  503: grpc.status.UNAVAILABLE,
  504: grpc.status.DEADLINE_EXCEEDED,
  507: grpc.status.RESOURCE_EXHAUSTED,
};

type Parameter = { parameter_choice?: string } & Record<string, unknown>;
type Contents = Record<string, unknown[] | undefined>;

interface InferRequestMessage {
  model_name: string;
  model_version: string;
  id: string;
  parameters: Record<string, Parameter>;
  inputs: {
    name: string;
    datatype: string;
    shape: number[];
    parameters: Record<string, Parameter>;
    contents?: Contents;
  }[];
  outputs: { name: string }[];
  raw_input_contents: Buffer[];
}

/** The typed `contents` field that carries each dtype (FP16/BF16 have none: raw bytes only). */
const CONTENTS_FIELD: Partial<Record<DType, string>> = {
  bool: 'bool_contents',
  int8: 'int_contents',
  int16: 'int_contents',
  int32: 'int_contents',
  int64: 'int64_contents',
  uint8: 'uint_contents',
  float32: 'fp32_contents',
  float64: 'fp64_contents',
};

const double = (value: number) => ({ double_param: value });

/** The ModelInferResponse message: the outputs asked for (all when none were), as raw contents. */
function inferResponse(
  req: InferRequestMessage,
  result: TensorInferenceResult,
  wanted: string[],
  parameters: Record<string, unknown>,
) {
  const outputs = wanted.length
    ? wanted.map((name) => result.outputs.find((o) => o.name === name) as (typeof result.outputs)[number])
    : result.outputs;
  return {
    model_name: result.model,
    model_version: result.version,
    id: req.id,
    parameters,
    outputs: outputs.map(({ name, tensor }) => ({ name, datatype: oipDatatype(tensor.dtype), shape: tensor.shape })),
    raw_output_contents: outputs.map(({ tensor }) =>
      Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength),
    ),
  };
}

function plainParameters(parameters: Record<string, Parameter>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(parameters ?? {}))
    if (value?.parameter_choice) out[key] = value[value.parameter_choice];
  return out;
}

function decodeInputs(req: InferRequestMessage, maxArrayElements: number): Map<string, TensorSource> {
  const raw = req.raw_input_contents ?? [];
  if (raw.length > 0 && raw.length !== req.inputs.length)
    throw tgError(
      'INVALID_REQUEST',
      `raw_input_contents has ${raw.length} entries for ${req.inputs.length} inputs; give one per input, in order`,
    );
  const inputs = new Map<string, TensorSource>();
  for (const [i, input] of req.inputs.entries()) {
    const name = input.name;
    if (inputs.has(name)) throw tgError('INVALID_REQUEST', `input "${name}" is given twice`);
    if (input.datatype === 'BYTES') {
      inputs.set(name, bytesInput(name, input, raw.length > 0 ? (raw[i] as Buffer) : undefined));
      continue;
    }
    const dtype = dtypeOf(input.datatype);
    if (typeof dtype === 'object') throw tgError('BAD_TENSOR', `input "${name}": ${dtype.reason}`, { input: name });
    const shape = input.shape.map(Number);
    try {
      checkShape(shape);
    } catch (err) {
      throw tgError('BAD_TENSOR', `input "${name}": ${(err as Error).message}`, { input: name });
    }
    if (raw.length > 0) {
      try {
        inputs.set(name, tensorSource(makeTensor(dtype, shape, raw[i] as Buffer)));
      } catch (err) {
        throw tgError('BYTE_LENGTH_MISMATCH', `input "${name}": ${(err as Error).message}`, { input: name });
      }
      continue;
    }
    const field = CONTENTS_FIELD[dtype];
    const values = field ? input.contents?.[field] : undefined;
    if (!values || values.length === 0)
      throw tgError(
        'INVALID_REQUEST',
        `input "${name}" has no data: send raw_input_contents${field ? ` or contents.${field}` : ''}`,
        { input: name },
      );
    if (numel(shape) > maxArrayElements || values.length !== numel(shape))
      throw tgError(
        'BAD_TENSOR',
        `input "${name}": contents holds ${values.length} values but shape [${shape.join(', ')}] needs ${numel(shape)}`,
        { input: name },
      );
    const tensor = fromNestedArray(values.map(Number), dtype, { maxElements: maxArrayElements });
    inputs.set(name, tensorSource({ ...tensor, shape }));
  }
  return inputs;
}

/**
 * A BYTES input (image files for a model with processing): raw_input_contents already holds the
 * serialisation the worker reads (a 4-byte little-endian length, then the bytes, per element),
 * checked against the shape; contents.bytes_contents holds the elements themselves.
 */
function bytesInput(name: string, input: InferRequestMessage['inputs'][number], raw: Buffer | undefined): TensorSource {
  const shape = input.shape.map(Number);
  try {
    checkShape(shape);
  } catch (err) {
    throw tgError('BAD_TENSOR', `input "${name}": ${(err as Error).message}`, { input: name });
  }
  const count = numel(shape);
  if (raw) return serialisedBytesSource(name, raw, count);
  const elements = input.contents?.bytes_contents ?? [];
  if (elements.length !== count)
    throw tgError(
      'BAD_TENSOR',
      `input "${name}": contents.bytes_contents holds ${elements.length} elements but shape [${shape.join(', ')}] needs ${count}`,
      { input: name },
    );
  return bytesSource(elements as Uint8Array[]);
}

export interface GrpcServerHandle {
  port: number;
  close: () => Promise<void>;
}

export interface GrpcOptions {
  /** When set, every call but the health ones needs `authorization: Bearer ...` metadata. */
  authenticator?: Authenticator;
  /** TLS: certificate chain and key (PEM files). */
  tls?: { certFile: string; keyFile: string };
  /** Per-caller request rates, as over HTTP; health calls are exempt. */
  rateLimiter?: RateLimiter;
}

/** Liveness and readiness answer without credentials, as over HTTP. */
const PUBLIC_METHODS = new Set(['ServerLive', 'ServerReady']);

export async function serveGrpc(
  gateway: Gateway,
  port: number,
  host = '127.0.0.1',
  opts: GrpcOptions = {},
): Promise<GrpcServerHandle> {
  const definition = protoLoader.loadSync(PROTO, {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const service = (grpc.loadPackageDefinition(definition).inference as grpc.GrpcObject)
    .GRPCInferenceService as grpc.ServiceClientConstructor;
  const limit = gateway.config.maxHttpBodyBytes;
  const server = new grpc.Server({
    'grpc.max_receive_message_length': limit,
    'grpc.max_send_message_length': -1,
  });

  /** The caller of a call (undefined when auth is off or for health), or UNAUTHENTICATED. */
  const authenticate = async (method: string, call: grpc.ServerUnaryCall<unknown, unknown>) => {
    if (!opts.authenticator || PUBLIC_METHODS.has(method)) return undefined;
    const header = call.metadata.get('authorization')[0];
    try {
      return await opts.authenticator.authenticate(typeof header === 'string' ? header : undefined);
    } catch (err) {
      gateway.audit.record({
        actor: `remote:${call.getPeer()}`,
        action: 'auth_failed',
        target: `grpc:${method}`,
        reason: (err as Error).message,
      });
      throw err;
    }
  };
  const unary =
    <Req, Res>(
      fn: (request: Req, call: grpc.ServerUnaryCall<Req, Res>, caller: AuthInfo | undefined) => Res | Promise<Res>,
    ) =>
    (call: grpc.ServerUnaryCall<Req, Res>, callback: grpc.sendUnaryData<Res>) => {
      const method = call.getPath().split('/').pop() as string;
      (async () => {
        const caller = await authenticate(method, call as grpc.ServerUnaryCall<unknown, unknown>);
        // The peer is `ipv4:ADDRESS:PORT`; callers without a credential are told apart by address.
        if (!PUBLIC_METHODS.has(method)) opts.rateLimiter?.take(caller, call.getPeer().replace(/:\d+$/, ''));
        return fn(call.request, call, caller);
      })().then(
        (response) => callback(null, response),
        (err: unknown) => {
          const error = asTensorgateError(err);
          callback({
            code: GRPC_STATUS[error.status] ?? grpc.status.INTERNAL,
            details: `${error.code as ErrorCode}: ${error.message}`,
          });
        },
      );
    };

  server.addService(service.service, {
    ServerLive: unary(() => ({ live: true })),
    ServerReady: unary(() => ({ ready: serverReady(gateway) })),
    ServerMetadata: unary(() => serverMetadata()),
    ModelMetadata: unary((req: { name: string; version: string }, _call, caller) => {
      gateway.access.check(caller, 'read', kindOf(gateway, req.name), req.name);
      return isWorkflow(gateway, req.name)
        ? workflowMetadata(gateway, req.name, req.version)
        : modelMetadata(gateway, req.name, req.version);
    }),
    ModelReady: unary((req: { name: string; version: string }, _call, caller) => {
      gateway.access.check(caller, 'read', kindOf(gateway, req.name), req.name);
      return {
        ready: isWorkflow(gateway, req.name)
          ? workflowReady(gateway, req.name, req.version)
          : modelReady(gateway, req.name, req.version),
      };
    }),
    RepositoryIndex: unary((_req, _call, caller) => ({ models: repositoryIndex(gateway, caller) })),
    RepositoryModelLoad: unary(async (req: { model_name: string }, call, caller) => {
      gateway.access.check(caller, 'modify', 'model', req.model_name);
      await gateway.loadFromRepository(req.model_name, caller?.clientId ?? `remote:${call.getPeer()}`);
      return {};
    }),
    RepositoryModelUnload: unary(async (req: { model_name: string }, call, caller) => {
      gateway.access.check(caller, 'modify', 'model', req.model_name);
      await gateway.unloadModel(req.model_name, undefined, caller?.clientId ?? `remote:${call.getPeer()}`);
      return {};
    }),
    ModelInfer: unary(async (req: InferRequestMessage, call, caller) => {
      if (isWorkflow(gateway, req.model_name)) return inferWorkflowMessage(req, call, caller);
      gateway.access.check(caller, 'execute', 'model', req.model_name);
      const model = gateway.modelConfig(req.model_name).name;
      const wanted = req.outputs.map((o) => o.name);
      checkOutputs(gateway, model, wanted);
      const inputs = decodeInputs(req, gateway.config.maxArrayElements);
      const gone = new AbortController();
      call.on('cancelled', () => gone.abort());
      const result = await gateway.inferTensors(
        {
          model,
          ...(req.model_version ? { version: req.model_version } : {}),
          ...(req.id ? { request_id: req.id } : {}),
          parameters: tensorgateParameters(plainParameters(req.parameters)),
          inputs,
          // BYTES elements over gRPC are bytes (the image files), never text to be read as paths.
          form:
            (req.raw_input_contents ?? []).length > 0 || req.inputs.some((i) => i.datatype === 'BYTES')
              ? 'binary'
              : 'array',
        },
        { signal: gone.signal, adapter: 'oip-grpc' },
      );
      const t = result.timings;
      return inferResponse(req, result, wanted, {
        variant: { string_param: result.variant },
        batch_size: { int64_param: result.batch_size },
        decode_ms: double(t.decode_ms),
        queue_ms: double(t.queue_ms),
        transfer_ms: double(t.transfer_ms),
        compute_ms: double(t.compute_ms),
        total_ms: double(t.total_ms),
      });
    }),
  });

  /** A workflow, served like a model: literal outputs and the stage records come as parameters. */
  async function inferWorkflowMessage(
    req: InferRequestMessage,
    call: grpc.ServerUnaryCall<InferRequestMessage, unknown>,
    caller: AuthInfo | undefined,
  ) {
    checkWorkflowAccess(gateway, caller, req.model_name);
    const wanted = req.outputs.map((o) => o.name);
    checkWorkflowOutputs(gateway, req.model_name, wanted);
    const gone = new AbortController();
    call.on('cancelled', () => gone.abort());
    const { result, parameters } = await inferWorkflow(
      gateway,
      req.model_name,
      req.model_version || undefined,
      {
        ...(req.id ? { id: req.id } : {}),
        parameters: tensorgateParameters(plainParameters(req.parameters)),
        inputs: decodeInputs(req, gateway.config.maxArrayElements),
        form: (req.raw_input_contents ?? []).length > 0 ? 'binary' : 'array',
      },
      { signal: gone.signal, adapter: 'oip-grpc' },
    );
    const produced = new Set(result.outputs.map((o) => o.name));
    return inferResponse(
      req,
      result,
      wanted.filter((n) => produced.has(n)),
      Object.fromEntries(
        Object.entries(parameters).map(([k, v]) => [k, typeof v === 'number' ? double(v) : { string_param: v }]),
      ),
    );
  }

  const bound = await new Promise<number>((resolveBind, reject) =>
    server.bindAsync(`${host}:${port}`, credentials(opts), (err, actual) => (err ? reject(err) : resolveBind(actual))),
  );
  return {
    port: bound,
    close: () =>
      new Promise<void>((resolveClose) => {
        server.tryShutdown(() => resolveClose());
        // Calls still running after the grace period are cut.
        setTimeout(() => server.forceShutdown(), 2000).unref();
      }),
  };
}

function credentials(opts: GrpcOptions): grpc.ServerCredentials {
  if (!opts.tls) return grpc.ServerCredentials.createInsecure();
  return grpc.ServerCredentials.createSsl(null, [
    { cert_chain: readFileSync(opts.tls.certFile), private_key: readFileSync(opts.tls.keyFile) },
  ]);
}
