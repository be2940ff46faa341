import type { AuthInfo } from '@modelcontextprotocol/server';
import type { Gateway } from '../gateway.js';
import type { HttpAnswer } from '../http/answer.js';
import type { InferBody } from '../http/body.js';
import type { OutputSink } from '../tensor/source.js';
import { checkWorkflowAccess } from '../workflows/run-workflow.js';
import { encodeInferResponse, type OipInferRequest, parseInferRequest } from './infer-codec.js';
import { checkOutputs, checkWorkflowOutputs, inferWorkflow, isWorkflow } from './service.js';
import type { SharedMemoryRegistry } from './shared-memory.js';

/**
 * One OIP v2 infer call, from a caller and a body to the answer: what the /v2 infer route does,
 * whichever thread read the body (the HTTP server's, or a data-plane thread's, data-plane.ts).
 */
export interface InferCall {
  /** The verified caller; undefined when auth is off. */
  auth: AuthInfo | undefined;
  model: string;
  version: string | undefined;
  /** The body, asked for once the caller may call the model and the model exists. */
  body: () => Promise<InferBody>;
  /** The Inference-Header-Content-Length header, as sent. */
  headerLength: string | string[] | undefined;
  /** Aborted when the client goes away: the request is withdrawn. */
  signal: AbortSignal;
  /** The front door, for logs and traces: the main port's REST routes, or the data plane's. */
  adapter: 'oip-rest' | 'oip-data';
}

export async function answerInfer(
  gateway: Gateway,
  regions: SharedMemoryRegistry,
  call: InferCall,
): Promise<HttpAnswer> {
  const { model: name, version } = call;
  const workflow = isWorkflow(gateway, name);
  if (workflow) checkWorkflowAccess(gateway, call.auth, name);
  else gateway.access.check(call.auth, 'execute', 'model', name);
  // An unknown model is answered before its body is read or parsed.
  const config = workflow ? undefined : gateway.modelConfig(name);
  const request = parseInferRequest(await call.body(), call.headerLength, {
    maxArrayElements: gateway.config.maxArrayElements,
    regions,
  });
  try {
    const { headers, parts } = config
      ? await inferModel(gateway, request, config.name, version, call)
      : await inferWorkflowCall(gateway, request, name, version, call);
    return { status: 200, headers, parts };
  } finally {
    request.release();
  }
}

/** The shared-memory regions a request wants outputs in, for its worker to write them itself. */
function outputSinks(request: OipInferRequest): OutputSink[] {
  return (request.outputs ?? []).flatMap((o) => (o.shm?.sink ? [o.shm.sink] : []));
}

async function inferModel(
  gateway: Gateway,
  request: OipInferRequest,
  model: string,
  version: string | undefined,
  { signal, adapter }: InferCall,
) {
  checkOutputs(
    gateway,
    model,
    (request.outputs ?? []).map((o) => o.name),
  );
  const result = await gateway.inferTensors(
    {
      model,
      ...(version !== undefined ? { version } : {}),
      ...(request.id !== undefined ? { request_id: request.id } : {}),
      parameters: request.parameters,
      inputs: request.inputs,
      form: request.form,
      sinks: outputSinks(request),
    },
    { signal, adapter },
  );
  const encodeStart = performance.now();
  const t = result.timings;
  return encodeInferResponse(result, request, {
    variant: result.variant,
    batch_size: result.batch_size,
    decode_ms: t.decode_ms,
    queue_ms: t.queue_ms,
    transfer_ms: t.transfer_ms,
    compute_ms: t.compute_ms,
    encode_ms: Math.round((t.encode_ms + performance.now() - encodeStart) * 1000) / 1000,
    total_ms: Math.round((t.total_ms + performance.now() - encodeStart) * 1000) / 1000,
  });
}

async function inferWorkflowCall(
  gateway: Gateway,
  request: OipInferRequest,
  name: string,
  version: string | undefined,
  { signal, adapter }: InferCall,
) {
  checkWorkflowOutputs(
    gateway,
    name,
    (request.outputs ?? []).map((o) => o.name),
  );
  const { result, parameters } = await inferWorkflow(gateway, name, version, request, { signal, adapter });
  // An output asked for by name that came out as a literal is in the parameters, not the tensors.
  const produced = new Set(result.outputs.map((o) => o.name));
  const outputs = request.outputs?.filter((o) => produced.has(o.name)) ?? null;
  return encodeInferResponse(result, { ...request, outputs }, parameters);
}
