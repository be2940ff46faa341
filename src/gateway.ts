import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { AuditLog } from './audit/audit-log.js';
import type { GatewayConfig } from './config.js';
import type { Engine, ImageGeometry, NamedTensor, VariantReport } from './engines/engine.js';
import { OnnxEngine } from './engines/onnx/onnx-engine.js';
import { RemoteEngine } from './engines/remote/remote-engine.js';
import { sweepStaleArenas } from './engines/torch/arena.js';
import { sweepStaleForkDirs } from './engines/torch/fork-server.js';
import { shmMapUnavailableReason } from './engines/torch/shm-map.js';
import { TorchEngine } from './engines/torch/torch-engine.js';
import { asTensorgateError, type TensorgateError, tgError } from './errors.js';
import { InteractiveTraffic } from './jobs/interactive-traffic.js';
import { JobManager } from './jobs/job-manager.js';
import { GpuSampler } from './metrics/gpu.js';
import { InferenceStats } from './metrics/inference-stats.js';
import { PrometheusMetrics } from './metrics/prometheus.js';
import { RequestWindow } from './metrics/request-window.js';
import { AfterAnswers } from './observability/after-answers.js';
import type { Logger } from './observability/logger.js';
import type { Adapter, RequestObserver } from './observability/request-observer.js';
import { defaultVersion, type ModelConfig } from './registry/model-config.js';
import type {
  ClassificationOutputConfig,
  DetectionOutputConfig,
  EmbeddingOutputConfig,
  ImageOutputConfig,
  MaskOutputConfig,
} from './registry/processing.js';
import { type ModelRecord, Registry, type RegistryChange } from './registry/registry.js';
import { readModelDir, scanRepository } from './registry/repository.js';
import { classify, type Prediction } from './requests/classify.js';
import { type DecodedInput, decodeInputs, type InputForm, preparedInputs } from './requests/decode-inputs.js';
import { decodeProcessedInputs, preparedProcessedInputs } from './requests/decode-processed.js';
import { type DetectionAnswer, detect } from './requests/detect.js';
import { type EmbeddingAnswer, embedRows } from './requests/embed.js';
import type { InferenceRequest } from './requests/inference-request.js';
import { parseParameters } from './requests/parameters.js';
import { type OutputResult, presentOutput } from './requests/present-output.js';
import { type RenderedImage, renderImages, renderMasks } from './requests/render-images.js';
import { ModelManager, type VersionState } from './scheduler/model-manager.js';
import type { ModelPool } from './scheduler/model-pool.js';
import type { VariantChoice, VariantRoute, VersionVariants } from './scheduler/version-variants.js';
import { AccessControl } from './security/rbac.js';
import { roundSignificant } from './tensor/number-format.js';
import type { OutputSink, TensorSource } from './tensor/source.js';
import { TensorStore } from './tensor/store.js';
import { numel } from './tensor/tensor.js';
import { TrainingControl } from './training/training-control.js';
import { WorkflowCatalogue, type WorkflowInfo, workflowFile } from './workflows/catalogue.js';
import { decodeWorkflowInputs, executeWorkflowRequest } from './workflows/run-workflow.js';

/**
 * The core every adapter (MCP, CLI, later HTTP/OIP v2) talks to: the registry, the running model
 * pools, the tensor store, and the inference pipeline decode -> queue -> engine -> encode with the
 * time of every stage measured.
 */

export type { Logger, OutputResult };

export interface StageTimings {
  decode_ms: number;
  /** Models with processing: decoding and transforming images into tensors, in the worker. */
  preprocess_ms?: number;
  queue_ms: number;
  transfer_ms: number;
  compute_ms: number;
  /** Models with processing: turning outputs into the answer (activation, top-k labels). */
  postprocess_ms?: number;
  encode_ms: number;
  total_ms: number;
}

export interface InferenceResult {
  request_id: string;
  model: string;
  version: string;
  /** The variant that ran it, `engine-precision` (torch-fp32, torch-int8, onnx-fp32). */
  variant: string;
  /** Rows in the forward pass that served this request (more than its own when batched). */
  batch_size: number;
  outputs: OutputResult[];
  /** Models with a classification output: per item (image, text, recording), its top labels. */
  predictions?: Prediction[][];
  /** Models with an embedding output: what the vectors behind the output's handle are. */
  embedding?: EmbeddingAnswer;
  /** Models with a detection output: per image, the objects found, in the image's own pixels. */
  detections?: DetectionAnswer[];
  /** Models with a processing handler that answers: its answer per item. */
  answers?: unknown[];
  /** Models with an image or mask output: a PNG per item. */
  images?: RenderedImage[];
  /** Models with a text output: each item's token ids, decoded. */
  texts?: string[];
  /** The output tensors themselves, when the caller asked not to keep them (`keepOutputs: false`). */
  tensors?: NamedTensor[];
  timings: StageTimings;
  notes: string[];
}

export interface InferOptions {
  /** Aborts the request (a client that went away). */
  signal?: AbortSignal;
  /** The adapter the request came through, for the request log and spans. */
  adapter?: Adapter;
  /**
   * false: the outputs are not kept behind tensor:// handles; the result carries the tensors
   * themselves (`tensors`) for the caller to use at once (batch jobs, whose outputs would
   * otherwise crowd out the handles interactive callers hold).
   */
  keepOutputs?: boolean;
}

/** What is known of a failed request where it failed. */
export interface FailureContext {
  model?: string | undefined;
  version?: string | undefined;
  requestId?: string;
  adapter?: Adapter | undefined;
  totalMs?: number;
}

export interface TensorInferenceRequest {
  model: string;
  version?: string;
  request_id?: string;
  parameters?: Record<string, unknown>;
  /** Inputs by name, already decoded by the adapter. */
  inputs: Map<string, TensorSource>;
  form: InputForm;
  /**
   * Files the adapter wants outputs in (OIP shared-memory regions): a worker that can writes them
   * itself and marks them `written`; the adapter writes the rest from the result.
   */
  sinks?: readonly OutputSink[];
}

export interface TensorInferenceResult {
  request_id: string;
  model: string;
  version: string;
  variant: string;
  batch_size: number;
  outputs: NamedTensor[];
  timings: StageTimings;
}

export interface VersionStatus {
  version: string;
  state: VersionState;
  /** Live figures: queued and running requests, restarts, forward passes by batch size. */
  stats?: ModelPool['stats'];
  device?: string;
  load_ms?: number;
  warmup_ms?: number;
  /** Parameters and buffers held, all instances together. */
  loaded_bytes?: number;
  error?: string;
  /** Each variant: engine, precision, how it is built, its check against fp32 and measured latency. */
  variants?: VariantReport[];
  /** Which variant serves each offered precision by default, and why. */
  engine_choice?: VariantChoice[];
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
  readonly audit: AuditLog;
  /** Request counts and stage times per model version (OIP v2 statistics). */
  readonly stats = new InferenceStats();
  /** Prometheus metrics for /metrics. */
  readonly metrics: PrometheusMetrics = new PrometheusMetrics(this);
  /** The last few thousand requests of each version: percentiles, rates, diagnoses. */
  private readonly requestWindow = new RequestWindow();
  /** GPU utilisation and memory; `serve` starts it, and it reports nothing where there is no GPU. */
  readonly gpu = new GpuSampler();
  /** Training runs in the runs directory; `serve` starts its polling, other commands query on demand. */
  readonly training: TrainingControl;
  /** Who may do what (RBAC); every adapter asks it before acting for an authenticated caller. */
  readonly access: AccessControl;
  /** Registered workflows, compiled against the registered models. */
  readonly workflows: WorkflowCatalogue;
  /** Batch jobs: a model run over many files or texts, its answers written to a file (src/jobs). */
  readonly jobs: JobManager;
  /** When each model was last called by anything but a batch job (performance.now()). */
  private readonly interactive = new InteractiveTraffic();
  private readonly models: ModelManager;
  /** Registrations running now, by model name: a second one of the same name is refused. */
  private readonly registering = new Map<string, string>();
  private readonly modelListeners = new Set<() => void>();
  /** The request log and the tracer, when attached; with none, requests pay nothing for them. */
  private observers: RequestObserver[] = [];
  /** What an answered request records (metrics, window, observers), done once its answer has left. */
  private readonly afterAnswers = new AfterAnswers((err) =>
    this.log(`could not record an answered request: ${(err as Error)?.message ?? String(err)}`, { level: 'error' }),
  );
  private closed = false;
  private startingUp = false;

  /**
   * Opens the registry (a SQLite file, or a shared PostgreSQL database: REGISTRY_UNAVAILABLE when
   * it cannot be reached) and builds the gateway on it. Nothing is loaded until `loadAll` or `register`.
   */
  static async open(config: GatewayConfig, log: Logger = () => {}): Promise<Gateway> {
    const registry = await Registry.open(config.registry, {
      replica: config.replicaId,
      log: (message, fields) => log(message, fields),
    });
    return new Gateway(config, registry, log);
  }

  private constructor(
    readonly config: GatewayConfig,
    registry: Registry,
    private readonly log: Logger,
  ) {
    const removed = sweepStaleArenas();
    if (removed.length > 0) log(`removed ${removed.length} stale shared-memory arenas`, { removed: removed.length });
    const sockets = sweepStaleForkDirs();
    if (sockets.length > 0) log(`removed ${sockets.length} stale worker socket folders`, { removed: sockets.length });
    const unmapped = shmMapUnavailableReason();
    if (unmapped) log(`input arenas use fs writes, one copy more per input: ${unmapped}`, { level: 'warn' });
    this.registry = registry;
    this.store = new TensorStore(config.storeMaxBytes, config.storeTtlMs, Date.now, config.replicaId);
    this.audit = new AuditLog(config.auditLogPath);
    this.access = AccessControl.fromFile(config.rolesFile);
    this.access.onDenied = ({ caller, permission, kind, name }) =>
      this.audit.record({ actor: caller, action: 'access_denied', target: `${kind}:${name}`, permission });
    this.workflows = new WorkflowCatalogue(
      this.registry,
      (name) => {
        if (!this.registry.has(name)) return undefined;
        const config = this.modelConfig(name);
        // A model with processing takes files and texts, which its worker makes its tensors of.
        return {
          inputs: config.processing ? [] : config.inputs,
          ...(config.processing ? { processed: config.processing.inputs } : {}),
          outputs: config.outputs,
          models: [name],
          workflows: [],
          versions: Object.keys(config.versions),
        };
      },
      (message, fields) => log(message, { level: 'error', ...fields }),
    );
    this.training = new TrainingControl({ runsDir: config.runsDir, audit: this.audit, log });
    this.jobs = new JobManager({
      infer: (request, options) => this.infer(request, options),
      inferTensors: (request, options) => this.inferTensors(request, options),
      modelConfig: (name) => this.modelConfig(name),
      workflowPlan: (name) => {
        const plan = this.workflows.plan(name);
        return { processed: Object.keys(plan.processed), models: plan.models };
      },
      runWorkflow: async (workflow, inputs, options) => {
        const { run } = await executeWorkflowRequest(
          this,
          { workflow, decode: (plan) => decodeWorkflowInputs(plan, inputs, this) },
          options,
        );
        return run.outputs;
      },
      allowedRoots: config.allowedRoots,
      store: registry.store,
      interactiveSince: (model, ms) => this.interactive.since(model, ms),
      interactiveQuietMs: (model) => this.interactive.quietMs(model),
      log: (message, fields) => log(message, fields),
    });
    this.models = new ModelManager({
      engines: new Map<string, Engine>([
        ['torch', new TorchEngine({ onLog: log, cacheDir: config.cacheDir })],
        ['onnx', new OnnxEngine()],
        ['remote', new RemoteEngine()],
      ]),
      maxQueue: config.maxQueue,
      memoryBudgetMb: config.memoryBudgetMb,
      log,
      onLoaded: (name, version, { info, error }) => {
        if (info)
          void this.registry.setVersionStatus(name, version, 'ready', { loadMs: info.loadMs, warmupMs: info.warmupMs });
        else void this.registry.setVersionStatus(name, version, 'failed', { error: error?.message ?? 'unknown' });
      },
      onChange: () => this.modelsChanged(),
    });
  }

  /**
   * Calls `listener` whenever what is served may have changed: a model registered, a version
   * ready, failed or unloading (the MCP server's per-model tools follow it). Returns the detach.
   */
  onModelsChanged(listener: () => void): () => void {
    this.modelListeners.add(listener);
    return () => this.modelListeners.delete(listener);
  }

  private modelsChanged(): void {
    for (const listener of this.modelListeners) listener();
  }

  /** Starts GPU sampling; GPU metrics appear in /metrics once a GPU is found, never otherwise. */
  async startGpuSampling(): Promise<void> {
    if (await this.gpu.start()) this.metrics.registerGpuMetrics(this.gpu);
  }

  /** True once close() has begun: no new requests are taken. */
  get closing(): boolean {
    return this.closed;
  }

  /**
   * True while `loadAll` (a server starting) registers and loads the repository: the server is
   * not ready yet. Loads after that (a registration, a model changed on another replica, an
   * on-demand load) leave it ready, so that replicas loading a new model together do not all
   * leave their load balancer at once; the model itself answers MODEL_NOT_READY meanwhile.
   */
  get starting(): boolean {
    return this.startingUp;
  }

  /**
   * Marks the gateway as starting before `loadAll` begins, for a server that opens its ports
   * first (so that MCP's initialize is answered while models load): a readiness probe between
   * the first port opening and the load beginning (the OIP data port's threads starting, about
   * 0.2 s) must not find it ready with nothing loaded. `loadAll` ends it.
   */
  beginStartup(): void {
    this.startingUp = true;
  }

  /**
   * Validates a model folder and records it; then (for `load: eager`, the default) loads and warms
   * every version and resolves when each is ready or failed. `on_demand` models load on first use.
   */
  async register(dir: string, actor = 'local'): Promise<ModelSummaryInfo> {
    return this.audited(actor, 'register_model', `dir:${resolve(dir)}`, async () => {
      const source = readModelDir(dir);
      const name = source.config.name;
      const running = this.registering.get(name);
      if (running !== undefined)
        throw tgError(
          'REGISTRATION_CONFLICT',
          `model "${name}" is being registered from ${running} by another request; retry once it has finished`,
          { model: name },
        );
      this.registering.set(name, source.dir);
      try {
        await this.registry.upsert(name, source.dir, source.config);
        this.modelsChanged();
        // Workflows calling this model are checked again against its new specs.
        this.workflows.refresh();
        // What the old workers hold (running and queued) finishes on them, within the grace;
        // requests arriving meanwhile wait for the new registration's workers.
        await this.models.unload(name, undefined, this.config.shutdownGraceMs);
        if (source.config.load === 'eager') await this.loadVersions(name, source.dir, source.config, true);
        return this.modelInfo(name, { variants: true });
      } finally {
        this.registering.delete(name);
      }
    });
  }

  /** Registers a workflow folder (workflow.json or .yaml); refused with INVALID_WORKFLOW unless it compiles. */
  async registerWorkflow(dir: string, actor = 'local'): Promise<WorkflowInfo> {
    return this.audited(actor, 'register_workflow', `dir:${resolve(dir)}`, async () => {
      const info = await this.workflows.register(dir);
      this.modelsChanged(); // a workflow taking files gets a tool of its own
      return info;
    });
  }

  /** Whether a folder holds a workflow rather than a model. */
  static isWorkflowDir(dir: string): boolean {
    return workflowFile(resolve(dir)) !== undefined;
  }

  /**
   * Registers every model already in the registry and every model folder in the repository (what
   * `serve` does). All are recorded first, so list_models shows the whole set while they load.
   * From then on the gateway follows the registry: models registered, re-registered or removed
   * by another process (another replica, `tensorgate register`) are loaded, reloaded or unloaded.
   */
  async loadAll(): Promise<void> {
    this.startingUp = true;
    try {
      await this.registerAndLoadAll();
    } finally {
      this.startingUp = false;
    }
  }

  private async registerAndLoadAll(): Promise<void> {
    const dirs = new Set(this.registry.list().map((m) => m.dir));
    for (const dir of scanRepository(this.config.modelsDir)) dirs.add(dir);
    const recorded: ModelRecord[] = [];
    for (const dir of dirs) {
      try {
        const source = readModelDir(dir);
        // `sync`: what is stored already is left as it is, so replicas starting together agree.
        recorded.push(await this.registry.upsert(source.config.name, source.dir, source.config, 'sync'));
      } catch (err) {
        this.log(`could not register ${dir}: ${(err as Error).message}`, { level: 'error', dir });
      }
    }
    if (this.closed) return; // Stopped while registering: nothing is to be loaded or followed.
    // Compiled against the models' declared specs: they need not be loaded yet.
    await this.workflows.loadAll(this.config.modelsDir);
    this.registry.onChange((change) => void this.followRegistry(change));
    this.registry.watch();
    await Promise.all(
      recorded
        .filter(({ config }) => config.load === 'eager')
        .map(({ name, dir, config }) => this.loadVersions(name, dir, config)),
    );
    // Jobs the last run of the server left unfinished go on from their last commit, unless the
    // server is already stopping (its registry is closed by then).
    if (this.closed) return;
    await this.jobs
      .resumeInterrupted()
      .catch((err) => this.log(`could not resume the batch jobs: ${(err as Error).message}`, { level: 'error' }));
  }

  /** Applies registrations made by another process: new and changed models (re)load, removed ones unload. */
  private async followRegistry(change: RegistryChange): Promise<void> {
    if (this.closed) return;
    if (change.workflows.length > 0 || change.models.length > 0 || change.removed.length > 0)
      this.workflows.followRegistry();
    this.log('the registry changed elsewhere', { level: 'info', ...change });
    this.modelsChanged();
    await Promise.all([
      ...change.removed.map((name) => this.models.unload(name, undefined, this.config.shutdownGraceMs)),
      ...change.models.map(async (name) => {
        if (!this.registry.has(name)) return;
        const { dir, config } = this.registry.get(name);
        await this.models.unload(name, undefined, this.config.shutdownGraceMs);
        if (config.load === 'eager') await this.loadVersions(name, dir, config);
      }),
    ]);
  }

  /** Loads one version (the default when omitted) and resolves when it is ready: `load_model`. */
  async loadModel(name: string, version?: string, actor = 'local'): Promise<ModelSummaryInfo> {
    const config = this.modelConfig(name);
    const v = this.checkVersion(config, version ?? defaultVersion(config));
    return this.audited(actor, 'load_model', `model:${name}@${v}`, async () => {
      await this.models.load(name, v, this.dirOf(name), config);
      return this.modelInfo(name);
    });
  }

  /**
   * OIP v2 repository `load`, as Triton does it: when the repository holds a folder of that name,
   * it is read again and registered (a new model, or a changed config, reaches every replica
   * sharing the registry); otherwise the registered model's default version is loaded.
   */
  async loadFromRepository(name: string, actor = 'local'): Promise<ModelSummaryInfo> {
    const dir = join(this.config.modelsDir, name);
    // A plain folder name only (no `..`): nothing outside the repository is ever read this way.
    const info =
      /^[A-Za-z0-9][\w.-]*$/.test(name) && existsSync(join(dir, 'config.json'))
        ? await this.register(dir, actor)
        : await this.loadModel(name, undefined, actor);
    // As Triton answers a load: an error when a version did not load, not a model listed as failed.
    const failed = info.versions.find((v) => v.state === 'failed');
    if (failed)
      throw tgError('LOAD_FAILED', failed.error ?? `${name}@${failed.version} failed to load`, { model: name });
    return info;
  }

  /** Unloads one version, or all of a model's: `unload_model`. Running requests finish first. */
  async unloadModel(name: string, version?: string, actor = 'local'): Promise<ModelSummaryInfo> {
    const config = this.modelConfig(name);
    if (version !== undefined) this.checkVersion(config, version);
    return this.audited(
      actor,
      'unload_model',
      `model:${name}${version !== undefined ? `@${version}` : ''}`,
      async () => {
        await this.models.unload(name, version, this.config.shutdownGraceMs);
        return this.modelInfo(name);
      },
    );
  }

  /**
   * Runs an admin action and writes it to the audit log once it has finished, with its outcome
   * (`ok`, or the error code): the log says what was done, not only what was asked.
   */
  private async audited<T>(actor: string, action: string, target: string, fn: () => Promise<T>): Promise<T> {
    try {
      const result = await fn();
      this.audit.record({ actor, action, target, outcome: 'ok' });
      return result;
    } catch (err) {
      this.audit.record({ actor, action, target, outcome: asTensorgateError(err).code });
      throw err;
    }
  }

  /**
   * Loads every version of a model; with `variants` (registration), also waits for their variants'
   * checks and latencies, which serving does not wait for: a ready model serves meanwhile.
   */
  private async loadVersions(name: string, dir: string, config: ModelConfig, variants = false): Promise<void> {
    await Promise.all(
      // A failed load leaves the version failed (or unloaded, when it never started) and is logged.
      Object.keys(config.versions).map((version) =>
        this.models.load(name, version, dir, config, { variants }).catch((err: unknown) => {
          // Unloaded before it was ready (the server stopping, an unload): the manager said so.
          if (asTensorgateError(err).code === 'SHUTTING_DOWN') return;
          this.log(`could not load ${name}@${version}: ${(err as Error).message}`, {
            level: 'error',
            model: name,
            version,
          });
        }),
      ),
    );
  }

  listModels(): ModelSummaryInfo[] {
    return this.registry.names().map((name) => this.modelInfo(name));
  }

  /** A model's versions and their state; `variants` adds each version's variants and engine choice. */
  modelInfo(name: string, { variants = false } = {}): ModelSummaryInfo {
    const config = this.modelConfig(name);
    const versions = Object.keys(config.versions).sort((a, b) => Number(a) - Number(b));
    return {
      name,
      description: config.description,
      default_version: defaultVersion(config),
      versions: versions.map((version) => {
        const pool = this.models.pool(name, version);
        const info = pool?.loadInfo;
        return {
          version,
          state: this.models.state(name, version),
          ...(pool ? { stats: pool.stats } : {}),
          ...(info
            ? {
                device: info.device,
                load_ms: round(info.loadMs),
                warmup_ms: round(info.warmupMs),
                loaded_bytes: info.weightsBytes * (pool?.stats.instances ?? 1),
              }
            : {}),
          ...(pool?.error ? { error: pool.error.message } : {}),
          ...(variants ? variantsOf(this.models.variants(name, version), config) : {}),
        };
      }),
    };
  }

  /** Where one version of a model is in its lifecycle (unloaded, loading, ready, unloading, failed). */
  versionState(name: string, version: string): VersionState {
    return this.models.state(name, version);
  }

  /** Queue, instance and batch-size figures of one loaded model version. */
  poolStats(name: string, version: string): ModelPool['stats'] | undefined {
    return this.models.pool(name, version)?.stats;
  }

  modelConfig(name: string): ModelConfig {
    return this.registry.get(name).config;
  }

  async infer(request: InferenceRequest, options: InferOptions = {}): Promise<InferenceResult> {
    const run = await this.execute(request, options, (config) =>
      config.processing
        ? decodeProcessedInputs(config, request.inputs, { config: this.config, store: this.store })
        : decodeInputs(config.inputs, request.inputs, { config: this.config, store: this.store }),
    );
    const postprocessStart = performance.now();
    const processed = run.config.processing?.output;
    const predictions = processed?.type === 'classification' ? this.predictions(run, processed) : undefined;
    const embedded = processed?.type === 'embedding' ? this.embedding(run, processed) : undefined;
    const detections = processed?.type === 'detection' ? this.detections(run, processed) : undefined;
    const images = processed?.type === 'image' || processed?.type === 'mask' ? this.images(run, processed) : undefined;
    const postprocessed = processed ? performance.now() - postprocessStart : undefined;
    const encodeStart = performance.now();
    const keep = options.keepOutputs !== false;
    const outputs = keep
      ? run.outputs.map(({ name, tensor }) =>
          presentOutput(this.store, name, tensor, `${run.config.name}@${run.version}:${name}`, {
            labels: run.config.outputs.find((o) => o.name === name)?.labels,
            topK: run.topK,
          }),
        )
      : [];
    const embedding = embedded && {
      ...embedded,
      uri: outputs.find((o) => o.name === embedded.output)?.uri ?? '',
    };
    return {
      request_id: run.request_id,
      model: run.model,
      version: run.version,
      variant: run.variant,
      batch_size: run.batch_size,
      outputs,
      ...(predictions ? { predictions } : {}),
      ...(embedding ? { embedding } : {}),
      ...(detections ? { detections } : {}),
      // A text output's answers are its decoded texts; a handler's are its own.
      ...(run.answers && processed?.type === 'text' ? { texts: run.answers as string[] } : {}),
      ...(run.answers && processed?.type !== 'text' ? { answers: run.answers } : {}),
      ...(images ? { images } : {}),
      ...(keep ? {} : { tensors: run.outputs }),
      timings: run.finish(encodeStart, postprocessed),
      notes: arrayInputNotes(run.inputs, this.config.arrayHintElements),
    };
  }

  /** A classification output's answer per item. */
  private predictions(
    run: { config: ModelConfig; outputs: NamedTensor[]; topK: number; threshold?: number },
    output: ClassificationOutputConfig,
  ): Prediction[][] | undefined {
    const name = output.tensor ?? run.config.outputs[0]?.name;
    const scores = run.outputs.find((o) => o.name === name)?.tensor;
    if (!scores) return undefined;
    const labels = run.config.outputs.find((o) => o.name === name)?.labels;
    return classify(scores, labels, output, { topK: run.topK, threshold: run.threshold });
  }

  /** A detection output's objects per image. */
  private detections(
    run: {
      config: ModelConfig;
      outputs: NamedTensor[];
      threshold?: number;
      geometry?: Record<string, ImageGeometry[]>;
    },
    output: DetectionOutputConfig,
  ): DetectionAnswer[] | undefined {
    const tensor = (name: string | undefined) => run.outputs.find((o) => o.name === name)?.tensor;
    const boxes = tensor(output.boxes);
    const scores = tensor(output.scores);
    if (!boxes || !scores) return undefined;
    const image =
      output.image ??
      Object.entries(run.config.processing?.inputs ?? {}).find(([, input]) => input.type === 'image')?.[0] ??
      '';
    const labels = run.config.outputs.find((o) => o.name === (output.labels ?? output.scores))?.labels;
    return detect({ boxes, scores, classes: tensor(output.labels) }, run.geometry?.[image] ?? [], labels, output, {
      threshold: run.threshold,
    });
  }

  /** An image or mask output's PNG per item. */
  private images(
    run: { config: ModelConfig; outputs: NamedTensor[] },
    output: ImageOutputConfig | MaskOutputConfig,
  ): RenderedImage[] | undefined {
    const name = output.tensor ?? run.config.outputs[0]?.name;
    const tensor = run.outputs.find((o) => o.name === name)?.tensor;
    if (!tensor) return undefined;
    return output.type === 'image'
      ? renderImages(tensor, output)
      : renderMasks(tensor, run.config.outputs.find((o) => o.name === name)?.labels);
  }

  /** An embedding output's answer; normalising replaces the output, so its handle holds unit vectors. */
  private embedding(
    run: { config: ModelConfig; outputs: NamedTensor[] },
    output: EmbeddingOutputConfig,
  ): Omit<EmbeddingAnswer, 'uri'> | undefined {
    const name = output.tensor ?? run.config.outputs[0]?.name;
    const entry = run.outputs.find((o) => o.name === name);
    if (!entry || name === undefined) return undefined;
    const { tensor, norms } = embedRows(entry.tensor, output.normalize);
    entry.tensor = tensor;
    return {
      output: name,
      items: norms.length,
      dims: tensor.shape[1] ?? 0,
      normalized: output.normalize,
      norms: norms.map((n) => roundSignificant(n, 4)),
    };
  }

  /**
   * Inference on inputs an adapter has already decoded (OIP v2), returning the output tensors
   * themselves for the adapter to encode; `encode_ms` is left for it to measure and add. Metrics,
   * the request log and spans see the gateway's part only: encoding by the adapter comes after.
   */
  async inferTensors(request: TensorInferenceRequest, options: InferOptions = {}): Promise<TensorInferenceResult> {
    const run = await this.execute(request, options, (config) =>
      config.processing
        ? preparedProcessedInputs(config, request.inputs, request.form, { config: this.config, store: this.store })
        : preparedInputs(config.inputs, request.inputs, request.form),
    );
    return {
      request_id: run.request_id,
      model: run.model,
      version: run.version,
      variant: run.variant,
      batch_size: run.batch_size,
      outputs: run.outputs,
      timings: run.finish(performance.now()),
    };
  }

  /**
   * Attaches an observer (the request log, the tracer) told of every request once it finished or
   * failed; returns what detaches it.
   */
  observe(observer: RequestObserver): () => void {
    this.observers = [...this.observers, observer];
    return () => {
      this.observers = this.observers.filter((o) => o !== observer);
    };
  }

  /**
   * The last few thousand requests of each version, every answered one included: the records
   * still queued to be made after their answers (AfterAnswers) are made first.
   */
  get window(): RequestWindow {
    this.afterAnswers.flush();
    return this.requestWindow;
  }

  /**
   * Makes now the records that answered requests still have queued: what a reader of the metrics
   * calls first, so that a request answered before it asked is counted.
   */
  flushRecords(): void {
    this.afterAnswers.flush();
  }

  /** decode -> queue -> engine, timed; what every inference adapter shares. */
  private async execute(
    request: {
      model: string;
      version?: string;
      request_id?: string;
      parameters?: Record<string, unknown>;
      sinks?: readonly OutputSink[];
    },
    { signal, adapter }: InferOptions,
    decode: (config: ModelConfig) => DecodedInput[],
  ) {
    const start = performance.now();
    // Batch jobs step back while a model has calls of any other kind (src/jobs).
    if (adapter !== 'job') this.interactive.begin(request.model);
    const requestId = request.request_id ?? randomUUID();
    let config: ModelConfig | undefined;
    let version: string | undefined;
    let inputs: DecodedInput[];
    let response: Awaited<ReturnType<ModelPool['infer']>>;
    let parameters: ReturnType<typeof parseParameters>;
    let route: VariantRoute;
    let decodeStart = start;
    let decodeMs = 0;
    try {
      if (this.closed) throw tgError('SHUTTING_DOWN', 'the server is stopping');
      config = this.modelConfig(request.model);
      version = request.version ?? defaultVersion(config);
      const pool = this.poolFor(config, version);
      parameters = parseParameters(request.parameters, config);
      route = (await this.models.variants(config.name, version)?.route(parameters.precision, parameters.engine)) ?? {
        pool,
        variant: `${config.engine}-${parameters.precision}`,
      };
      const timeoutMs = parameters.timeout_ms ?? config.timeout_ms ?? this.config.defaultTimeoutMs;
      decodeStart = performance.now();
      inputs = decode(config);
      decodeMs = performance.now() - decodeStart;
      const sinks = request.sinks?.map((sink) => ({ sink, row: 0 }));
      const answer = route.pool.infer(
        { inputs, precision: parameters.precision, ...(sinks?.length ? { sinks } : {}) },
        { timeoutMs, signal, background: adapter === 'job' },
      );
      // The request is with a worker, or queued for one: until its answer the thread is free, and
      // the records of the requests answered before it are made now (AfterAnswers).
      this.afterAnswers.whileWaiting();
      response = await answer;
    } catch (err) {
      // Every failure is counted: by code, and against the model version when it is known.
      const name = config?.name;
      if (name !== undefined && version !== undefined) this.stats.failure(name, version, performance.now() - start);
      // Always counted here, even when the error object is shared by the requests of one batch.
      throw this.countFailure(asTensorgateError(err), {
        model: name,
        version,
        requestId,
        adapter,
        totalMs: performance.now() - start,
      });
    } finally {
      if (adapter !== 'job') this.interactive.end(request.model);
    }
    const rows = inputs[0]?.tensor.shape[0] ?? 1;
    const model = config.name;
    const modelVersion = version;
    return {
      request_id: requestId,
      model,
      version: modelVersion,
      config,
      inputs,
      topK: parameters.top_k,
      threshold: parameters.threshold,
      variant: route.variant,
      batch_size: response.batchSize,
      outputs: response.outputs,
      answers: response.answers,
      geometry: response.geometry,
      /** The stage timings, with encoding counted from `encodeStart` to now. */
      finish: (encodeStart: number, gatewayPostprocessMs?: number): StageTimings => {
        const end = performance.now();
        const t = response.timings;
        this.stats.success(model, modelVersion, {
          totalMs: end - start,
          queueMs: response.queueMs,
          inputMs: decodeMs + t.fillMs + (t.preprocessMs ?? 0) + t.transferMs / 2,
          computeMs: t.computeMs,
          outputMs: t.transferMs / 2 + (end - encodeStart),
          rows,
        });
        const preprocessMs = response.timings.preprocessMs;
        // A handler's postprocess (in the worker) and the gateway's (labels) are one stage.
        const workerPostprocessMs = response.timings.postprocessMs;
        const postprocessTotal =
          workerPostprocessMs === undefined ? gatewayPostprocessMs : (gatewayPostprocessMs ?? 0) + workerPostprocessMs;
        const timings: StageTimings = {
          // Base64 and .npy inputs are decoded straight into shared memory by the engine: still decoding.
          decode_ms: round(decodeMs + response.timings.fillMs),
          ...(preprocessMs !== undefined ? { preprocess_ms: round(preprocessMs) } : {}),
          queue_ms: round(response.queueMs),
          transfer_ms: round(response.timings.transferMs),
          compute_ms: round(response.timings.computeMs),
          ...(postprocessTotal !== undefined ? { postprocess_ms: round(postprocessTotal) } : {}),
          encode_ms: round(end - encodeStart),
          total_ms: round(end - start),
        };
        // Only what the records need is kept until they are made: not the inputs or the outputs.
        const form = inputs[0]?.form;
        const batchSize = response.batchSize;
        const variant = route.variant;
        this.afterAnswers.add(() => {
          this.metrics.recordSuccess(model, modelVersion, variant, timings, rows, batchSize);
          if (this.metrics.enabled)
            this.requestWindow.recordSuccess(model, modelVersion, requestId, timings, batchSize, rows, form);
          if (this.observers.length > 0) {
            const finished = {
              request_id: requestId,
              model,
              version: modelVersion,
              adapter,
              variant,
              batch_size: batchSize,
              rows,
              timings,
              startedAt: start,
              decodeStartedAt: decodeStart,
              encodeStartedAt: encodeStart,
              endedAt: end,
            };
            for (const observer of this.observers) observer.finished(finished);
          }
        });
        return timings;
      },
    };
  }

  /**
   * Counts a failed request once, whichever layer saw it first (the pipeline, or an adapter that
   * could not even parse the request): by code, and against its model version when known.
   */
  recordFailure(err: unknown, where: FailureContext = {}): TensorgateError {
    const error = asTensorgateError(err);
    return counted.has(error) ? error : this.countFailure(error, where);
  }

  private countFailure(error: TensorgateError, where: FailureContext): TensorgateError {
    counted.add(error);
    const endedAt = performance.now();
    // Made after the answer, like a finished request's, so that the records keep their order.
    this.afterAnswers.add(() => {
      if (this.metrics.enabled) {
        this.metrics.recordFailure(where.model, where.version, error);
        this.requestWindow.recordFailure(
          where.model,
          where.version,
          where.requestId ?? '',
          where.totalMs ?? 0,
          error.code,
        );
      }
      if (this.observers.length > 0) {
        const failed = {
          request_id: where.requestId,
          model: where.model,
          version: where.version,
          adapter: where.adapter,
          error,
          total_ms: where.totalMs === undefined ? undefined : round(where.totalMs),
          endedAt,
        };
        for (const observer of this.observers) observer.failed(failed);
      }
    });
    return error;
  }

  /**
   * Stops taking requests, lets queued and running ones finish for up to `graceMs` (the rest are
   * answered SHUTTING_DOWN), stops every worker and removes their shared-memory files.
   */
  async close(graceMs = this.config.shutdownGraceMs): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Jobs stop first, at their last commit, while the workers still answer what is in flight.
    await this.jobs.close();
    this.training.close();
    this.gpu.stop();
    await this.models.closeAll(graceMs);
    await this.registry.close();
    this.afterAnswers.flush();
  }

  /** The pool serving a version; an unloaded version starts loading and the request waits for it. */
  private poolFor(config: ModelConfig, version: string): ModelPool {
    this.checkVersion(config, version);
    const pool =
      this.models.pool(config.name, version) ??
      this.models.startLoad(config.name, version, this.dirOf(config.name), config);
    if (pool.state === 'failed') {
      throw tgError(
        'MODEL_NOT_READY',
        `${config.name}@${version} failed to load (${pool.error?.message}); fix the model and register it again`,
        { model: config.name, version },
      );
    }
    return pool;
  }

  private checkVersion(config: ModelConfig, version: string): string {
    if (!Object.hasOwn(config.versions, version)) {
      throw tgError(
        'VERSION_NOT_FOUND',
        `model "${config.name}" has no version "${version}"; it has ${Object.keys(config.versions).join(', ')} (default ${defaultVersion(config)})`,
        { model: config.name, version, versions: Object.keys(config.versions) },
      );
    }
    return version;
  }

  private dirOf(name: string): string {
    return this.registry.get(name).dir;
  }
}

/** Errors already counted: an adapter answering one the pipeline counted must not count it again. */
const counted = new WeakSet<object>();

function variantsOf(variants: VersionVariants | undefined, config: ModelConfig): Partial<VersionStatus> {
  if (!variants) return {};
  // A version loaded at start-up is measured when first described; this answer may come first.
  void variants.measured();
  const offered = ['fp32' as const, ...config.parameters.precision.filter((p) => p !== 'fp32')];
  return { variants: variants.reports(), engine_choice: variants.choices(offered) };
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
