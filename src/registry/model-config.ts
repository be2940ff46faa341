import { isAbsolute } from 'node:path';
import { z } from 'zod';
import { tgError } from '../errors.js';
import { DTYPES } from '../tensor/dtype.js';
import { ProcessingSchema, processingIssues } from './processing.js';

/** The model repository's config.json (docs/model-repository.md is the prose form of this schema). */

export const TensorSpecSchema = z.object({
  name: z.string().regex(/^[A-Za-z_][A-Za-z0-9_.:-]*$/, 'tensor names are identifiers such as "image" or "input_ids"'),
  dtype: z.enum(DTYPES),
  shape: z.array(z.number().int().min(-1)).max(8),
  labels: z.array(z.string()).optional(),
  description: z.string().optional(),
});
export type TensorSpec = z.infer<typeof TensorSpecSchema>;

/** fp32 runs the model as loaded (or optimized); bf16/fp16 under torch.autocast; int8 dynamically quantized. */
export const PRECISIONS = ['fp32', 'bf16', 'fp16', 'int8'] as const;
export type Precision = (typeof PRECISIONS)[number];

/**
 * How the torch engine prepares fp32: torch.compile, an AOTInductor package compiled for the
 * model's device (cached across restarts), or for TorchScript files freeze / optimize_for_inference.
 */
export const TORCH_OPTIMIZATIONS = ['none', 'compile', 'aoti', 'freeze', 'optimize_for_inference'] as const;
/** torch.compile's modes; reduce-overhead records CUDA graphs per batch size on a GPU. */
export const COMPILE_MODES = ['default', 'reduce-overhead', 'max-autotune-no-cudagraphs', 'max-autotune'] as const;
/** ONNX Runtime's graph optimization levels (SessionOptions.graphOptimizationLevel). */
export const ONNX_GRAPH_OPTIMIZATIONS = ['disabled', 'basic', 'extended', 'all'] as const;

/**
 * Defaults of validation.tolerance: the largest error a variant may show against plain fp32 on the
 * check inputs, by the rule for each output's kind (src/tensor/compare.ts): scaled to a class
 * output's range or another output's spread, or the share of integer elements that differ.
 */
/** validation.tolerance defaults; the torch worker's (python/tensorgate/_variants.py) match, except
 * fp32 on CUDA, which it loosens to TF32's precision. */
export const DEFAULT_TOLERANCE: Record<Precision, number> = { fp32: 1e-4, bf16: 5e-2, fp16: 1e-2, int8: 5e-2 };

// A path inside the version folder: a config must not point the worker at files elsewhere
// (another model's weights, or any file it can read) by `..` or an absolute path.
const insideVersionFolder = (f: string) => !isAbsolute(f) && !f.split(/[\\/]/).includes('..');

/**
 * export (torch.export .pt2), aoti (AOTInductor .pt2 package), eager and torchscript run on the
 * torch engine; onnx on the in-process onnx engine.
 */
export const MODEL_FORMATS = ['export', 'aoti', 'eager', 'torchscript', 'onnx'] as const;
export type ModelFormat = (typeof MODEL_FORMATS)[number];

const LocalVersionSchema = z
  .object({
    format: z.enum(MODEL_FORMATS),
    file: z.string().min(1).refine(insideVersionFolder, {
      message: 'file is a path inside the version folder, without ".." or a leading "/"',
    }),
    /**
     * An ONNX export of this version (`tensorgate register --export onnx` writes it): served by the
     * onnx engine, in the gateway, as this version's fp32 variant once it agrees with PyTorch.
     */
    onnx: z
      .string()
      .min(1)
      .refine(insideVersionFolder, {
        message: 'onnx is a path inside the version folder, without ".." or a leading "/"',
      })
      .optional(),
    entry: z
      .string()
      .regex(/^[A-Za-z_][\w.]*:[A-Za-z_]\w*$/, 'entry is "module:factory", e.g. "model:build"')
      .optional(),
  })
  .refine((v) => v.format !== 'eager' || v.entry !== undefined, {
    message: 'eager versions need an "entry" such as "model:build"',
  });
export type LocalVersionConfig = z.infer<typeof LocalVersionSchema>;

/** A version served by a remote OIP v2 endpoint (engine "remote"): which version to ask it for. */
const RemoteVersionSchema = z
  .object({
    format: z.literal('remote'),
    /** The remote model's version; its default version when absent. */
    version: z.string().regex(/^\d+$/, 'a remote version is a positive integer').optional(),
  })
  .strict();
export type RemoteVersionConfig = z.infer<typeof RemoteVersionSchema>;

export const VersionConfigSchema = z.discriminatedUnion('format', [RemoteVersionSchema, LocalVersionSchema]);
export type VersionConfig = z.infer<typeof VersionConfigSchema>;

/**
 * Where a remote model runs (engine "remote"): an OIP v2 endpoint such as KServe, Triton,
 * TorchServe in kservev2 mode, or another tensorgate. Calls go through the same scheduler as local
 * models (batching, timeouts, queue limits, metrics); `resources.instances` is how many calls may
 * be in flight to it at once.
 */
export const RemoteSchema = z
  .object({
    url: z
      .string()
      .regex(/^https?:\/\/[^\s/]+(\/[^\s]*)?$/, 'url is the endpoint root, e.g. "http://kserve.example:8080"')
      .transform((u) => u.replace(/\/+$/, '')),
    /** The model's name on the remote server; this model's name when absent. */
    model: z.string().min(1).optional(),
    /** Binary tensor data (the default) or JSON lists. */
    binary: z.boolean().default(true),
    /** Limit of one attempt, in ms; the request's own timeout still bounds the whole call. */
    timeout_ms: z.number().int().min(1).default(30_000),
    /** Attempts after the first for failures worth retrying (unreachable, 502/503/504), with backoff. */
    retries: z.number().int().min(0).max(10).default(2),
    backoff_ms: z.number().int().min(0).max(60_000).default(50),
    /** Extra request headers; a value "env:NAME" is read from the environment, so that secrets stay out of config files. */
    headers: z.record(z.string(), z.string()).default({}),
  })
  .strict();
export type RemoteConfig = z.infer<typeof RemoteSchema>;

/** The most CPUs one model's `resources.cpus` may name (Linux's default CPU_SETSIZE). */
const MAX_CPU_ID = 1023;

/**
 * A CPU list as `taskset -c` and cpusets write it ("1", "0-3", "0,2,4-7"), or the CPU ids as an
 * array; either way sorted, without repeats.
 */
export const CpuListSchema = z
  .union([
    z
      .string()
      .regex(
        /^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$/,
        'cpus is a CPU list such as "1", "2-3" or "0,2,4-7"',
      ),
    z.array(z.number().int().min(0)).min(1, 'cpus names at least one CPU'),
  ])
  .transform((value, ctx) => {
    const ids = typeof value === 'string' ? expandCpuList(value) : value;
    if (ids === undefined) {
      ctx.addIssue({ code: 'custom', message: 'a CPU range in cpus runs backwards (write "2-3", not "3-2")' });
      return z.NEVER;
    }
    const over = ids.find((id) => id > MAX_CPU_ID);
    if (over !== undefined) {
      ctx.addIssue({ code: 'custom', message: `cpus names CPU ${over}; CPU ids go up to ${MAX_CPU_ID}` });
      return z.NEVER;
    }
    return [...new Set(ids)].sort((a, b) => a - b);
  });

/** The ids a CPU list ("0-3,8", as /proc and taskset write it) names; undefined when a range runs backwards. */
export function expandCpuList(list: string): number[] | undefined {
  const ids: number[] = [];
  for (const part of list.split(',')) {
    const [first, last = first] = part.split('-').map((n) => Number(n.trim())) as [number, number?];
    if (last < first) return undefined;
    for (let id = first; id <= Math.min(last, MAX_CPU_ID + 1); id++) ids.push(id);
  }
  return ids;
}

/**
 * The CPUs instance `index` of `instances` runs on. With a CPU for each instance at least, the
 * list is cut into as many runs as there are instances, in order and as even as they come (5 CPUs
 * for 2 instances: 3 and 2), so that instances do not take turns on a core; with fewer, every
 * instance gets the whole list and the operating system shares it out. A worker on cores of its
 * own keeps their caches between calls; whether the call as a whole gains depends on what the
 * other cores are left to carry (docs/architecture.md#cpu-placement).
 */
export function instanceCpus(cpus: readonly number[], instances: number, index: number): number[] {
  if (instances <= 1 || cpus.length < instances) return [...cpus];
  const base = Math.floor(cpus.length / instances);
  const extra = cpus.length % instances;
  const start = index * base + Math.min(index, extra);
  return cpus.slice(start, start + base + (index < extra ? 1 : 0));
}

export const ResourcesSchema = z.object({
  device: z
    .string()
    .regex(/^(cpu|auto|cuda(:\d+)?)$/, 'device is cpu, cuda, cuda:N or auto')
    .default('cpu'),
  threads: z.number().int().min(1).max(256).default(1),
  memory_mb: z.number().int().positive().optional(),
  instances: z.number().int().min(1).max(64).default(1),
  /** Seconds a worker may take to load, warm up and check its variants before it is stopped. */
  load_timeout_s: z.number().positive().max(86_400).default(600),
  /**
   * How long a torch worker polls its control channel after answering before it sleeps, while
   * requests keep arriving within that time (docs/worker-protocol.md#spinning). Unset: 1000 on a
   * CUDA device, 0 (off) on the CPU, where a spinning worker takes a core from the forward passes.
   */
  spin_us: z.number().int().min(0).max(100_000).optional(),
  /**
   * Whether a torch worker begins a request that has arrived before it waits for the one on the
   * device (docs/worker-protocol.md#pipelining). Unset: on for a CUDA device without processing,
   * off on the CPU, where a forward pass is done when it returns.
   */
  pipeline: z.boolean().optional(),
  /**
   * The CPUs this model's torch workers run on (their affinity), split between its instances when
   * there are enough: see `instanceCpus`. Unset: wherever the operating system puts them.
   */
  cpus: CpuListSchema.optional(),
});

/**
 * Dynamic batching, as Triton configures it: concurrent requests with the same non-batch dims are
 * joined along dimension 0 into one forward pass of at most `max_batch_size` rows. The first
 * request of a batch waits at most `max_queue_delay_us` for others; a batch that reaches one of
 * `preferred_batch_sizes` (or the maximum) goes at once. With `adaptive_delay` (the default), a
 * request that is alone in the queue right after a forward pass that carried a single request goes
 * at once: at light traffic there is no company to wait for. `false` keeps Triton's fixed delay.
 */
export const BatchingSchema = z
  .object({
    max_batch_size: z.number().int().min(1, 'max_batch_size must be at least 1 (leave "batching" out to turn it off)'),
    max_queue_delay_us: z.number().int().min(0, 'max_queue_delay_us cannot be negative').default(0),
    preferred_batch_sizes: z.array(z.number().int().min(1)).default([]),
    adaptive_delay: z.boolean().default(true),
  })
  .refine((b) => b.preferred_batch_sizes.every((n) => n <= b.max_batch_size), {
    message: 'every preferred_batch_sizes entry must be at most max_batch_size',
    path: ['preferred_batch_sizes'],
  });
export type BatchingConfig = z.infer<typeof BatchingSchema>;

export const ModelConfigSchema = z
  .object({
    name: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, 'model names are lower-case: letters, digits, ".", "_", "-"'),
    description: z.string().default(''),
    engine: z.enum(['torch', 'onnx', 'remote']).default('torch'),
    remote: RemoteSchema.optional(),
    default_version: z.string().optional(),
    inputs: z.array(TensorSpecSchema).min(1),
    outputs: z.array(TensorSpecSchema).min(1),
    parameters: z.object({ precision: z.array(z.enum(PRECISIONS)).default(['fp32']) }).default({ precision: ['fp32'] }),
    optimization: z
      .object({
        torch: z.enum(TORCH_OPTIMIZATIONS).default('none'),
        compile_mode: z.enum(COMPILE_MODES).default('default'),
        onnx_graph: z.enum(ONNX_GRAPH_OPTIMIZATIONS).default('all'),
      })
      .strict()
      .default({ torch: 'none', compile_mode: 'default', onnx_graph: 'all' }),
    validation: z
      .object({ tolerance: z.partialRecord(z.enum(PRECISIONS), z.number().positive()).default({}) })
      .strict()
      .default({ tolerance: {} }),
    resources: ResourcesSchema.prefault({}), // parsed, so the defaults above apply
    versions: z.record(z.string().regex(/^\d+$/, 'versions are positive integers'), VersionConfigSchema),
    warmup_runs: z.number().int().min(0).max(100).default(2),
    batching: BatchingSchema.optional(),
    /** eager: loaded when the server starts; on_demand: on the first request (which waits for it). */
    load: z.enum(['eager', 'on_demand']).default('eager'),
    /** Requests allowed to wait for this model; past that QUEUE_FULL. Default: the server's. */
    max_queue_size: z.number().int().min(1).optional(),
    /** Default per-request timeout in ms; a request may ask for another. Default: the server's. */
    timeout_ms: z.number().int().min(1).optional(),
    /** Safe to run twice: a request whose worker crashed is retried once on a fresh worker. */
    idempotent: z.boolean().default(false),
    /** What agents pass instead of tensors (image files) and the answer made of the outputs. */
    processing: ProcessingSchema.optional(),
  })
  .superRefine((cfg, ctx) => {
    const versions = Object.keys(cfg.versions);
    if (versions.length === 0) ctx.addIssue({ code: 'custom', message: 'at least one version is needed' });
    const remote = cfg.engine === 'remote';
    if (remote !== (cfg.remote !== undefined))
      ctx.addIssue({
        code: 'custom',
        path: ['remote'],
        message: remote
          ? 'engine "remote" needs a "remote" block with the url'
          : 'a "remote" block needs engine "remote"',
      });
    if (remote && cfg.parameters.precision.some((p) => p !== 'fp32'))
      ctx.addIssue({
        code: 'custom',
        path: ['parameters', 'precision'],
        message: 'a remote model is called as it is: only fp32 can be offered',
      });
    for (const [version, v] of Object.entries(cfg.versions))
      if ((v.format === 'remote') !== remote)
        ctx.addIssue({
          code: 'custom',
          path: ['versions', version, 'format'],
          message: remote ? 'versions of a remote model have format "remote"' : 'format "remote" needs engine "remote"',
        });
    const onnx = cfg.engine === 'onnx';
    for (const [version, v] of Object.entries(cfg.versions))
      if (v.format !== 'remote' && (v.format === 'onnx') !== onnx)
        ctx.addIssue({
          code: 'custom',
          path: ['versions', version, 'format'],
          message: onnx
            ? 'versions of an onnx model have format "onnx" (a .onnx file)'
            : 'format "onnx" runs on the in-process ONNX Runtime: set "engine": "onnx"',
        });
    for (const [version, v] of Object.entries(cfg.versions))
      if (v.format !== 'remote' && v.onnx !== undefined && (cfg.engine !== 'torch' || v.format === 'onnx'))
        ctx.addIssue({
          code: 'custom',
          path: ['versions', version, 'onnx'],
          message: 'an onnx variant belongs to a PyTorch version (engine "torch")',
        });
    const { cpus, instances, threads } = cfg.resources;
    // The smallest share an instance gets (the last one's): torch's threads on fewer cores than
    // there are threads wait for each other at every barrier (a 50x slower forward pass seen).
    const share = cpus && instanceCpus(cpus, instances, instances - 1).length;
    if (share && threads > share)
      ctx.addIssue({
        code: 'custom',
        path: ['resources', 'threads'],
        message: `${threads} threads on the ${share} CPU${share === 1 ? '' : 's'} ${instances > 1 && cpus && cpus.length >= instances ? 'each instance gets from' : 'of'} resources.cpus would wait on each other: set threads to at most ${share}, or name more CPUs`,
      });
    if (cfg.engine !== 'torch' && cfg.resources.cpus !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['resources', 'cpus'],
        message: `resources.cpus places torch workers; the ${cfg.engine} engine runs in the gateway process (place the gateway itself, e.g. with taskset)`,
      });
    if (cfg.engine !== 'torch' && cfg.resources.pipeline !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['resources', 'pipeline'],
        message: `resources.pipeline is a torch worker's; the ${cfg.engine} engine runs in the gateway process`,
      });
    if (cfg.engine !== 'torch' && cfg.optimization.torch !== 'none')
      ctx.addIssue({
        code: 'custom',
        path: ['optimization', 'torch'],
        message: `optimization.torch applies to the torch engine, not ${cfg.engine}`,
      });
    if (onnx && cfg.parameters.precision.some((p) => p !== 'fp32'))
      ctx.addIssue({
        code: 'custom',
        path: ['parameters', 'precision'],
        message: 'the onnx engine runs the graph as exported: only fp32 can be offered',
      });
    if (onnx)
      for (const [kind, specs] of [
        ['inputs', cfg.inputs],
        ['outputs', cfg.outputs],
      ] as const)
        specs.forEach((spec, i) => {
          if (spec.dtype === 'bfloat16')
            ctx.addIssue({
              code: 'custom',
              path: [kind, i, 'dtype'],
              message: 'ONNX Runtime for Node has no bfloat16 tensors',
            });
        });
    if (cfg.default_version !== undefined && !versions.includes(cfg.default_version)) {
      ctx.addIssue({ code: 'custom', message: `default_version "${cfg.default_version}" is not in versions` });
    }
    if (cfg.batching) {
      // Requests are joined and split along dimension 0, so every tensor must have it, dynamic.
      for (const [kind, specs] of [
        ['inputs', cfg.inputs],
        ['outputs', cfg.outputs],
      ] as const) {
        specs.forEach((spec, i) => {
          if (spec.shape[0] !== -1) {
            ctx.addIssue({
              code: 'custom',
              path: [kind, i, 'shape'],
              message: `batching needs a dynamic batch dimension: ${kind} "${spec.name}" must have shape [-1, ...]`,
            });
          }
        });
      }
    }
    if (cfg.processing)
      for (const issue of processingIssues(cfg.processing, cfg.inputs, cfg.outputs, cfg.engine))
        ctx.addIssue({ code: 'custom', ...issue });
    for (const [kind, specs] of [
      ['input', cfg.inputs],
      ['output', cfg.outputs],
    ] as const) {
      const names = new Set<string>();
      for (const spec of specs) {
        if (names.has(spec.name)) ctx.addIssue({ code: 'custom', message: `duplicate ${kind} name "${spec.name}"` });
        names.add(spec.name);
      }
    }
  });
export type ModelConfig = z.infer<typeof ModelConfigSchema>;

/** Parses and validates a config, turning zod issues into one INVALID_CONFIG error that lists them all. */
export function parseModelConfig(raw: unknown, source: string): ModelConfig {
  const parsed = ModelConfigSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
  throw tgError('INVALID_CONFIG', `${source} is not a valid model config: ${issues.join('; ')}`, { source, issues });
}

/** The version a request gets when it names none: the configured default, else the highest number. */
export function defaultVersion(cfg: ModelConfig): string {
  if (cfg.default_version !== undefined) return cfg.default_version;
  const versions = Object.keys(cfg.versions).sort((a, b) => Number(a) - Number(b));
  return versions[versions.length - 1] as string;
}

/** config.json as text: indented, with lists of plain values (shapes, labels) on one line. */
export function configText(config: unknown): string {
  const flat = (list: string) => `[${(JSON.parse(list) as unknown[]).map((v) => JSON.stringify(v)).join(', ')}]`;
  return `${JSON.stringify(config, null, 2).replace(/\[[^[\]{}]*\]/g, flat)}\n`;
}
