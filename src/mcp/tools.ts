import type { CallToolResult, McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { Gateway, InferenceResult, ModelSummaryInfo } from '../gateway.js';
import { describePredictions, type Prediction } from '../requests/classify.js';
import { type DetectionAnswer, describeDetections } from '../requests/detect.js';
import type { EmbeddingAnswer } from '../requests/embed.js';
import { InferenceRequestSchema } from '../requests/inference-request.js';
import type { RenderedImage } from '../requests/render-images.js';
import { TensorSummarySchema } from '../tensor/summary.js';
import { requestSignal } from './connection-signal.js';
import { schemaSharingRegistrar } from './output-schemas.js';
import { actorOf, callerOf, errorResult, jsonResult } from './results.js';

/** The tools an agent sees. Each is a thin mapping onto the Gateway; features live in the core. */

const TensorSpecOut = z.object({
  name: z.string(),
  dtype: z.string(),
  shape: z.array(z.number()),
  labels: z.array(z.string()).optional(),
  description: z.string().optional(),
});

const VersionOut = z.object({
  version: z.string(),
  state: z.string(),
  stats: z
    .object({
      instances: z.number(),
      pids: z.array(z.number()).describe('worker processes'),
      busy: z.number(),
      queued: z.number(),
      restarts: z.number(),
      batches: z.record(z.string(), z.number()).describe('forward passes by rows per pass'),
      pipelined: z.number().describe('forward passes sent to a worker while it still ran another'),
    })
    .optional(),
  device: z.string().optional(),
  load_ms: z.number().optional(),
  warmup_ms: z.number().optional(),
  loaded_bytes: z.number().optional().describe('parameters and buffers held, all instances together'),
  error: z.string().optional(),
  variants: z
    .array(
      z.object({
        precision: z.string(),
        engine: z.string(),
        method: z
          .string()
          .describe('how the variant is built: plain, autocast bf16, dynamic quantization, an ONNX export…'),
        state: z.enum(['ready', 'rejected', 'unavailable']),
        reason: z.string().optional(),
        output: z.string().optional().describe('the output furthest from plain fp32 on the check inputs'),
        rule: z
          .enum(['classes', 'values', 'exact'])
          .optional()
          .describe('how it was judged: top class and error per row range, error per spread, or equal elements'),
        error: z.number().optional().describe('its error, scaled to its range or spread (exact: share that differs)'),
        max_abs: z.number().optional().describe('largest absolute difference from plain fp32'),
        changed: z.number().optional().describe('rows whose top class changed (classes) or elements that differ'),
        compared: z.number().optional(),
        tolerance: z.number().optional(),
        build_ms: z.number().optional().describe('time spent building it: compilation, check and warm-up'),
        cached: z.boolean().optional().describe('compiled package found in the cache instead of compiled'),
        latency_ms: z
          .number()
          .optional()
          .describe('median of one-row requests through the variant, measured after loading'),
      }),
    )
    .optional()
    .describe('describe_model only: every way this version runs, checked against plain fp32'),
  engine_choice: z
    .array(z.object({ precision: z.string(), variant: z.string().nullable(), why: z.string() }))
    .optional()
    .describe('describe_model only: the variant serving each precision when a request names no engine, and why'),
});

const ModelOut = z.object({
  name: z.string(),
  description: z.string(),
  default_version: z.string(),
  versions: z.array(VersionOut),
});

export const TimingsOut = z.object({
  decode_ms: z.number(),
  preprocess_ms: z.number().optional().describe('models with processing: decoding and transforming the images'),
  queue_ms: z.number(),
  transfer_ms: z.number(),
  compute_ms: z.number(),
  postprocess_ms: z.number().optional().describe('models with processing: turning outputs into labels'),
  encode_ms: z.number(),
  total_ms: z.number(),
});

export const PredictionsOut = z
  .array(z.array(z.object({ label: z.string(), score: z.number(), index: z.number().int() })))
  .describe('per item (image, text, recording), its top labels, best first, with their probability');

export const DetectionsOut = z
  .array(
    z.object({
      width: z.number().int().describe("the image's width in pixels, upright as a viewer shows it"),
      height: z.number().int(),
      objects: z
        .array(
          z.object({
            label: z.string(),
            index: z.number().int(),
            score: z.number(),
            box: z
              .array(z.number())
              .length(4)
              .describe("[x1, y1, x2, y2]: left, top, right, bottom edges in the image's pixels"),
          }),
        )
        .describe('best first'),
    }),
  )
  .describe('per image, the objects found');

/** One line per image: "image 0: cat 0.93 at [12, 30, 200, 180]; dog 0.71 at [...]". */
export function detectionLines(detections: DetectionAnswer[]): string[] {
  return detections.map((d, i) => `${detections.length > 1 ? `image ${i}: ` : ''}${describeDetections(d)}`);
}

export const EmbeddingOut = z
  .object({
    output: z.string(),
    uri: z.string().describe('tensor:// handle of the [items, dims] vectors: read it as a resource or pass it on'),
    items: z.number().int(),
    dims: z.number().int(),
    normalized: z.boolean().describe('scaled to unit length (L2): cosine similarity is their dot product'),
    norms: z.array(z.number()).describe("each item's vector length before normalising"),
  })
  .describe('what the vectors behind the handle are');

/** "embedding: 3 vectors of 64 dims (unit length) at tensor://…": an embedding answer in a line. */
export function embeddingLine(e: EmbeddingAnswer): string {
  return `embedding: ${e.items} vector${e.items === 1 ? '' : 's'} of ${e.dims} dims${e.normalized ? ' (unit length)' : ''} at ${e.uri}; norms ${e.norms.join(', ')}`;
}

export const ImagesOut = z
  .array(
    z.object({
      width: z.number().int(),
      height: z.number().int(),
      coverage: z.record(z.string(), z.number()).optional().describe("masks: each class's share of the pixels"),
    }),
  )
  .describe('per item, the PNG answered as image content, in order');

/** "image 0: 64x64 PNG" or "mask: 64x64, background 0.71, cat 0.29": the pictures in lines. */
export function imageLines(images: RenderedImage[]): string[] {
  return images.map((image, i) => {
    const what = image.coverage ? 'mask' : 'image';
    const shares = image.coverage
      ? `, ${Object.entries(image.coverage)
          .map(([label, share]) => `${label} ${share}`)
          .join(', ')}`
      : ' PNG';
    return `${what}${images.length > 1 ? ` ${i}` : ''}: ${image.width}x${image.height}${shares}`;
  });
}

/** load_model's and unload_model's arguments (built once per process: a server is built per 2026-07-28 request). */
const versionArgs = z.object({
  model: z.string().describe('model name, from list_models'),
  version: z.string().optional().describe('one version; the default version when omitted'),
});

/** The pictures as MCP image content, and what the structured answer says of them. */
export function imageContent(images: RenderedImage[]) {
  return {
    content: images.map((image) => ({
      type: 'image' as const,
      data: image.png.toString('base64'),
      mimeType: 'image/png',
    })),
    structured: images.map(({ width, height, coverage }) => ({ width, height, ...(coverage ? { coverage } : {}) })),
  };
}

export const InferOut = z.object({
  request_id: z.string(),
  model: z.string(),
  version: z.string(),
  variant: z.string().describe('what ran it, engine-precision: torch-fp32, torch-int8, onnx-fp32…'),
  batch_size: z.number().int().describe('rows in the forward pass that served this call (more when batched)'),
  outputs: z.array(
    z.object({
      name: z.string(),
      dtype: z.string(),
      shape: z.array(z.number()),
      uri: z.string().describe('tensor:// handle: read it as a resource (.npy) or pass it as a later input'),
      summary: TensorSummarySchema,
    }),
  ),
  predictions: PredictionsOut.optional(),
  detections: DetectionsOut.optional(),
  embedding: EmbeddingOut.optional(),
  answers: z.array(z.unknown()).optional().describe("the model's processing handler: its answer per item"),
  images: ImagesOut.optional(),
  texts: z.array(z.string()).optional().describe("a text output: each item's tokens, decoded"),
  timings: TimingsOut,
  notes: z.array(z.string()),
});

export function registerTools(server: McpServer, gateway: Gateway): void {
  const register = schemaSharingRegistrar(server);
  register(
    'list_models',
    () => ({
      title: 'List models',
      description: 'Lists the models this server serves, with their versions and whether each is ready.',
      inputSchema: z.object({}),
      outputSchema: z.object({ models: z.array(ModelOut) }),
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    }),
    async (_args, ctx) => {
      try {
        const caller = callerOf(ctx);
        const models = gateway.listModels().filter((m) => gateway.access.can(caller, 'read', 'model', m.name));
        const text = models.length
          ? models
              .map(
                (m) => `${m.name} (v${m.versions.map((v) => `${v.version}:${v.state}`).join(', v')}) ${m.description}`,
              )
              .join('\n')
          : 'No models are registered.';
        return jsonResult(text, { models });
      } catch (err) {
        return errorResult(err);
      }
    },
  );

  register(
    'describe_model',
    () => ({
      title: 'Describe a model',
      description:
        'Shows what a model takes and returns: input and output tensors (name, dtype, shape with -1 for any size, class labels), precisions offered, resources and versions. Call it before infer.',
      inputSchema: z.object({ model: z.string().describe('model name, from list_models') }),
      outputSchema: ModelOut.extend({
        inputs: z.array(TensorSpecOut),
        outputs: z.array(TensorSpecOut),
        precisions: z.array(z.string()),
        resources: z.record(z.string(), z.unknown()),
        engine: z
          .string()
          .describe(
            'torch: PyTorch in worker processes here; onnx: ONNX Runtime inside the server process, no IPC; remote: another OIP v2 endpoint',
          ),
        remote: z.object({ url: z.string(), model: z.string() }).optional().describe('where a remote model runs'),
        processing: z
          .record(z.string(), z.unknown())
          .optional()
          .describe('what the model takes instead of tensors (image files) and how they become its inputs'),
      }),
      annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
    }),
    async ({ model }, ctx) => {
      try {
        gateway.access.check(callerOf(ctx), 'read', 'model', model);
        const info = gateway.modelInfo(model, { variants: true });
        const config = gateway.modelConfig(model);
        const structured = {
          ...info,
          inputs: config.inputs,
          outputs: config.outputs,
          precisions: ['fp32', ...config.parameters.precision.filter((p) => p !== 'fp32')],
          resources: config.resources,
          engine: config.engine,
          ...(config.remote ? { remote: { url: config.remote.url, model: config.remote.model ?? config.name } } : {}),
          ...(config.processing ? { processing: config.processing } : {}),
        };
        const io = (specs: typeof config.inputs) =>
          specs.map((s) => `${s.name} ${s.dtype}[${s.shape.join(', ')}]`).join(', ');
        const where = config.remote
          ? ` Runs remotely at ${config.remote.url} (model ${config.remote.model ?? config.name}).`
          : config.engine === 'onnx'
            ? ' Runs in ONNX Runtime inside the server process.'
            : '';
        const choice = info.versions
          .find((v) => v.version === info.default_version)
          ?.engine_choice?.map((c) => ` ${c.precision} → ${c.variant ?? 'none'} (${c.why}).`)
          .join('');
        const takes = config.processing
          ? ` Takes ${Object.entries(config.processing.inputs)
              .map(([n, input]) => `"${n}" (${input.type === 'text' ? 'text' : `${input.type} files`})`)
              .join(', ')} through its own tool "${config.processing.tool.name ?? model}" or infer.`
          : '';
        const text = `${model}: ${config.description}${takes} Inputs: ${io(config.inputs)}. Outputs: ${io(config.outputs)}.${where}${choice ? ` Variants:${choice}` : ''}`;
        return jsonResult(text, structured);
      } catch (err) {
        return errorResult(err);
      }
    },
  );

  register(
    'load_model',
    () => ({
      title: 'Load a model',
      description:
        'Loads a model version into worker processes and warms it up; returns when it is ready. Models also load on their first infer call, so this only moves the wait earlier. May unload the least recently used idle model to stay within the memory budget.',
      inputSchema: versionArgs,
      outputSchema: ModelOut,
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    }),
    async ({ model, version }, ctx) =>
      stateResult(model, () => {
        gateway.access.check(callerOf(ctx), 'modify', 'model', model);
        return gateway.loadModel(model, version, actorOf(server, ctx));
      }),
  );

  register(
    'unload_model',
    () => ({
      title: 'Unload a model',
      description:
        'Stops the worker processes of a model version (all versions when none is given) after their running requests finish, freeing their memory. The model stays registered and loads again on its next infer call.',
      inputSchema: versionArgs.extend({
        version: z.string().optional().describe('one version; all versions when omitted'),
      }),
      outputSchema: ModelOut,
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    }),
    async ({ model, version }, ctx) =>
      stateResult(model, () => {
        gateway.access.check(callerOf(ctx), 'modify', 'model', model);
        return gateway.unloadModel(model, version, actorOf(server, ctx));
      }),
  );

  register(
    'infer',
    () => ({
      title: 'Run a model',
      description:
        'Runs a model on named input tensors and returns, per output, its shape, dtype, a summary (top-k classes with labels, or min/max/mean/std, or the values when small) and a tensor:// handle to the full tensor, plus the time of each stage. For large inputs prefer {"path"} or {"b64"} over JSON arrays.',
      inputSchema: InferenceRequestSchema,
      outputSchema: InferOut,
      annotations: { readOnlyHint: true, idempotentHint: false, openWorldHint: false },
    }),
    async (request, ctx) => {
      try {
        gateway.access.check(callerOf(ctx), 'execute', 'model', request.model);
        // A cancellation from the client (or a closed connection) withdraws the queued request.
        return inferResult(await gateway.infer(request, { signal: requestSignal(ctx.mcpReq.signal), adapter: 'mcp' }));
      } catch (err) {
        return errorResult(err);
      }
    },
  );
}

/** The answer of load_model / unload_model: each version's state once the change is done. */
async function stateResult(model: string, change: () => Promise<ModelSummaryInfo>): Promise<CallToolResult> {
  // change() checks the caller first: a denial is answered like any other error.
  try {
    const info = await change();
    return jsonResult(`${model}: ${info.versions.map((v) => `v${v.version} ${v.state}`).join(', ')}`, { ...info });
  } catch (err) {
    return errorResult(err);
  }
}

/** "total 3.1 = decode 0.1 + preprocess 1.2 + ...": every stage the request went through. */
export function timingsLine(t: InferenceResult['timings']): string {
  const stages = [
    `decode ${t.decode_ms}`,
    ...(t.preprocess_ms !== undefined ? [`preprocess ${t.preprocess_ms}`] : []),
    `queue ${t.queue_ms}`,
    `transfer ${t.transfer_ms}`,
    `compute ${t.compute_ms}`,
    ...(t.postprocess_ms !== undefined ? [`postprocess ${t.postprocess_ms}`] : []),
    `encode ${t.encode_ms}`,
  ];
  return `timings ms: total ${t.total_ms} = ${stages.join(' + ')}`;
}

/** One line per item: "item 0: 7 (0.98), 1 (0.01)" (no index for a single item). */
export function predictionLines(predictions: Prediction[][]): string[] {
  return predictions.map((p, i) => `${predictions.length > 1 ? `item ${i}: ` : ''}${describePredictions(p)}`);
}

export function inferResult(result: InferenceResult): CallToolResult {
  const lines = [
    ...(result.predictions ? predictionLines(result.predictions) : []),
    ...(result.detections ? detectionLines(result.detections) : []),
    ...(result.embedding ? [embeddingLine(result.embedding)] : []),
    ...(result.answers ?? []).map((a, i, all) => `${all.length > 1 ? `item ${i}: ` : ''}${JSON.stringify(a)}`),
    ...(result.images ? imageLines(result.images) : []),
    ...(result.texts ?? []),
    `${result.model}@${result.version} (${result.variant}): ${result.outputs.map((o) => o.text).join('; ')}`,
    timingsLine(result.timings),
    ...result.notes,
  ];
  const pictures = result.images ? imageContent(result.images) : undefined;
  return {
    content: [
      { type: 'text', text: lines.join('\n') },
      ...(pictures?.content ?? []),
      ...result.outputs.map((o) => ({
        type: 'resource_link' as const,
        uri: o.uri,
        name: `${result.model}-${o.name}.npy`,
        mimeType: 'application/x-npy',
        description: `${o.name} ${o.dtype}[${o.shape.join(', ')}] of request ${result.request_id}`,
      })),
    ],
    structuredContent: {
      request_id: result.request_id,
      model: result.model,
      version: result.version,
      variant: result.variant,
      batch_size: result.batch_size,
      outputs: result.outputs.map(({ name, dtype, shape, uri, summary }) => ({ name, dtype, shape, uri, summary })),
      ...(result.predictions ? { predictions: result.predictions } : {}),
      ...(result.detections ? { detections: result.detections } : {}),
      ...(result.embedding ? { embedding: result.embedding } : {}),
      ...(result.answers ? { answers: result.answers } : {}),
      ...(pictures ? { images: pictures.structured } : {}),
      ...(result.texts ? { texts: result.texts } : {}),
      timings: result.timings,
      notes: result.notes,
    },
  };
}
