import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { GatewayConfig } from './config.js';
import type { Engine } from './engines/engine.js';
import { sweepStaleArenas } from './engines/torch/arena.js';
import { shmMapUnavailableReason } from './engines/torch/shm-map.js';
import { TorchEngine } from './engines/torch/torch-engine.js';
import { asTensorgateError, tgError } from './errors.js';
import { defaultVersion, type ModelConfig, type Precision } from './registry/model-config.js';
import { Registry } from './registry/registry.js';
import { readModelDir, scanRepository } from './registry/repository.js';
import { decodeInputs } from './requests/decode-inputs.js';
import type { InferenceRequest } from './requests/inference-request.js';
import { type InferenceParameters, parseParameters } from './requests/parameters.js';
import { ModelPool, type PoolState } from './scheduler/model-pool.js';
import { TensorStore } from './tensor/store.js';
import { describeSummary, summarizeTensor, type TensorSummary } from './tensor/summary.js';
import { numel } from './tensor/tensor.js';

/**
 * The core every adapter (MCP, CLI, later HTTP/OIP v2) talks to: the registry, the running model
 * pools, the tensor store, and the inference pipeline decode -> queue -> engine -> encode with the
 * time of every stage measured.
 */

export type Logger = (line: string) => void;

export interface StageTimings {
  decode_ms: number;
  queue_ms: number;
  transfer_ms: number;
  compute_ms: number;
  encode_ms: number;
  total_ms: number;
}

export interface OutputResult {
  name: string;
  dtype: string;
  shape: number[];
  uri: string;
  summary: TensorSummary;
  text: string;
}

export interface InferenceResult {
  request_id: string;
  model: string;
  version: string;
  /** Rows in the forward pass that served this request (more than its own when batched). */
  batch_size: number;
  outputs: OutputResult[];
  timings: StageTimings;
  notes: string[];
}

export interface VersionStatus {
  version: string;
  state: PoolState | 'not_loaded';
  /** Live figures: queued and running requests, restarts, forward passes by batch size. */
  stats?: ModelPool['stats'];
  device?: string;
  load_ms?: number;
  warmup_ms?: number;
  error?: string;
}

export interface ModelSummaryInfo {
  name: string;
  description: string;
  default_version: string;
  versions: VersionStatus[];
}

export class Gateway {
  readonly registry: Registry;
  readonly store: TensorStore;
  private readonly pools = new Map<string, ModelPool>();
  private readonly configs = new Map<string, ModelConfig>();
  private readonly engines: Map<string, Engine>;
  private closed = false;

  constructor(
    readonly config: GatewayConfig,
    private readonly log: Logger = () => {},
  ) {
    const removed = sweepStaleArenas();
    if (removed.length > 0) log(`removed ${removed.length} stale shared-memory arenas`);
    const unmapped = shmMapUnavailableReason();
    if (unmapped) log(`input arenas use fs writes, one copy more per input: ${unmapped}`);
    this.registry = new Registry(config.registryPath);
    this.store = new TensorStore(config.storeMaxBytes, config.storeTtlMs);
    this.engines = new Map([['torch', new TorchEngine({ onLog: log })]]);
  }

  /** Validates a model folder, records it, then loads and warms every version; ready when all succeed. */
  async register(dir: string): Promise<ModelSummaryInfo> {
    const { name, dir: abs, config } = this.record(dir);
    await this.unloadModel(name);
    await this.loadModel(name, abs, config);
    return this.modelInfo(name);
  }

  /**
   * Registers every model already in the registry and every model folder in the repository (what
   * `serve` does). All are recorded first, so list_models shows the whole set while they load.
   */
  async loadAll(): Promise<void> {
    const dirs = new Set(this.registry.list().map((m) => m.dir));
    for (const dir of scanRepository(this.config.modelsDir)) dirs.add(dir);
    const recorded = [];
    for (const dir of dirs) {
      try {
        recorded.push(this.record(dir));
      } catch (err) {
        this.log(`could not register ${dir}: ${(err as Error).message}`);
      }
    }
    await Promise.all(recorded.map(({ name, dir, config }) => this.loadModel(name, dir, config)));
  }

  private record(dir: string): { name: string; dir: string; config: ModelConfig } {
    const source = readModelDir(dir);
    this.registry.upsert(source.config.name, source.dir, source.config);
    this.configs.set(source.config.name, source.config);
    return { name: source.config.name, dir: source.dir, config: source.config };
  }

  listModels(): ModelSummaryInfo[] {
    return this.registry.names().map((name) => this.modelInfo(name));
  }

  modelInfo(name: string): ModelSummaryInfo {
    const config = this.modelConfig(name);
    const versions = Object.keys(config.versions).sort((a, b) => Number(a) - Number(b));
    return {
      name,
      description: config.description,
      default_version: defaultVersion(config),
      versions: versions.map((version) => {
        const pool = this.pools.get(poolKey(name, version));
        const info = pool?.loadInfo;
        return {
          version,
          state: pool?.state ?? 'not_loaded',
          ...(pool ? { stats: pool.stats } : {}),
          ...(info ? { device: info.device, load_ms: round(info.loadMs), warmup_ms: round(info.warmupMs) } : {}),
          ...(pool?.error ? { error: pool.error.message } : {}),
        };
      }),
    };
  }

  /** Configs are cached in memory: the hot path never queries SQLite or re-validates JSON. */
  /** Queue, instance and batch-size figures of one loaded model version. */
  poolStats(name: string, version: string): ModelPool['stats'] | undefined {
    return this.pools.get(poolKey(name, version))?.stats;
  }

  modelConfig(name: string): ModelConfig {
    let config = this.configs.get(name);
    if (!config) {
      config = this.registry.get(name).config;
      this.configs.set(name, config);
    }
    return config;
  }

  async infer(request: InferenceRequest, options: { signal?: AbortSignal } = {}): Promise<InferenceResult> {
    if (this.closed) throw tgError('SHUTTING_DOWN', 'the server is stopping');
    const start = performance.now();
    const requestId = request.request_id ?? randomUUID();
    const config = this.modelConfig(request.model);
    const version = request.version ?? defaultVersion(config);
    const pool = this.poolFor(config, version);
    const parameters = parseParameters(request.parameters, config);

    const decodeStart = performance.now();
    const inputs = decodeInputs(config.inputs, request.inputs, { config: this.config, store: this.store });
    const decodeMs = performance.now() - decodeStart;

    const timeoutMs = parameters.timeout_ms ?? config.timeout_ms ?? this.config.defaultTimeoutMs;
    const response = await pool.infer(
      { inputs, precision: parameters.precision as Precision },
      { timeoutMs, signal: options.signal },
    );

    const encodeStart = performance.now();
    const outputs = response.outputs.map(({ name, tensor }) => {
      const spec = config.outputs.find((o) => o.name === name);
      const summary = summarizeTensor(tensor, { labels: spec?.labels, topK: parameters.top_k });
      const stored = this.store.put(tensor, `${config.name}@${version}:${name}`);
      return {
        name,
        dtype: tensor.dtype,
        shape: tensor.shape,
        uri: stored.uri,
        summary,
        text: describeSummary(name, summary),
      };
    });
    const end = performance.now();
    return {
      request_id: requestId,
      model: config.name,
      version,
      batch_size: response.batchSize,
      outputs,
      timings: {
        // Base64 and .npy inputs are decoded straight into shared memory by the engine: still decoding.
        decode_ms: round(decodeMs + response.timings.fillMs),
        queue_ms: round(response.queueMs),
        transfer_ms: round(response.timings.transferMs),
        compute_ms: round(response.timings.computeMs),
        encode_ms: round(end - encodeStart),
        total_ms: round(end - start),
      },
      notes: arrayInputNotes(inputs, this.config.arrayHintElements),
    };
  }

  /**
   * Stops taking requests, lets queued and running ones finish for up to `graceMs` (the rest are
   * answered SHUTTING_DOWN), stops every worker and removes their shared-memory files.
   */
  async close(graceMs = this.config.shutdownGraceMs): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.pools.values()].map((p) => p.close(graceMs)));
    this.pools.clear();
    this.registry.close();
  }

  private poolFor(config: ModelConfig, version: string): ModelPool {
    if (!Object.hasOwn(config.versions, version)) {
      throw tgError(
        'VERSION_NOT_FOUND',
        `model "${config.name}" has no version "${version}"; it has ${Object.keys(config.versions).join(', ')} (default ${defaultVersion(config)})`,
        { model: config.name, version, versions: Object.keys(config.versions) },
      );
    }
    const pool = this.pools.get(poolKey(config.name, version));
    // A pool that is still loading queues the request until it is ready (or fails it with the load
    // error), so a client that calls right after launching the server gets an answer, not a retry.
    if (!pool) {
      throw tgError('MODEL_NOT_READY', `${config.name}@${version} is registered but not loaded; retry shortly`, {
        model: config.name,
        version,
      });
    }
    if (pool.state === 'failed') {
      throw tgError(
        'MODEL_NOT_READY',
        `${config.name}@${version} failed to load (${pool.error?.message}); fix the model and register it again`,
        { model: config.name, version },
      );
    }
    return pool;
  }

  private async loadModel(name: string, dir: string, config: ModelConfig): Promise<void> {
    const engine = this.engines.get(config.engine);
    if (!engine) throw tgError('UNSUPPORTED_FORMAT', `engine "${config.engine}" is not available`);
    await Promise.all(
      Object.keys(config.versions).map(async (version) => {
        const pool = new ModelPool(
          engine,
          { config, version, dir },
          { maxQueue: this.config.maxQueue, onLog: this.log },
        );
        this.pools.set(poolKey(name, version), pool);
        this.log(`loading ${name}@${version} (${config.versions[version]?.format}, ${config.resources.device})`);
        try {
          const info = await pool.start();
          this.registry.setVersionStatus(name, version, 'ready', { loadMs: info.loadMs, warmupMs: info.warmupMs });
          this.log(
            `ready ${name}@${version} on ${info.device}: load ${round(info.loadMs)} ms, warm-up ${round(info.warmupMs)} ms`,
          );
        } catch (err) {
          const error = asTensorgateError(err);
          this.registry.setVersionStatus(name, version, 'failed', { error: error.message });
          this.log(`failed ${name}@${version}: ${error.message}`);
        }
      }),
    );
  }

  private async unloadModel(name: string): Promise<void> {
    const closing: Promise<void>[] = [];
    for (const [key, pool] of this.pools) {
      if (key.startsWith(`${name}@`)) {
        closing.push(pool.close());
        this.pools.delete(key);
      }
    }
    await Promise.allSettled(closing);
  }
}

export type { InferenceParameters };

function poolKey(name: string, version: string): string {
  return `${name}@${version}`;
}

function round(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

function arrayInputNotes(inputs: ReturnType<typeof decodeInputs>, threshold: number): string[] {
  const notes: string[] = [];
  for (const input of inputs) {
    const elements = numel(input.tensor.shape);
    if (input.form !== 'array' || elements <= threshold) continue;
    notes.push(
      `input "${input.name}" came as a JSON array of ${elements} numbers (${input.tensor.byteLength} bytes); ` +
        `decoding it took ${round(input.decodeMs)} ms here, plus JSON parsing in transport. ` +
        'Send {"b64", "shape"} or {"path"} (or a tensor:// handle) instead: the bytes then cross without per-number parsing.',
    );
  }
  return notes;
}
