import { performance } from 'node:perf_hooks';
import type { Engine, LoadInfo } from '../engines/engine.js';
import { asTensorgateError, type TensorgateError, tgError } from '../errors.js';
import type { Logger } from '../observability/logger.js';
import type { ModelConfig } from '../registry/model-config.js';
import { ModelPool } from './model-pool.js';
import { VersionVariants } from './version-variants.js';

/**
 * Which model versions are loaded: the pools, their lifecycle (unloaded → loading → ready →
 * unloading, or failed with the reason), and the memory budget. A version is loaded at start
 * (`load: eager`), on its first request (`on_demand`, or after an unload), or by `load_model`.
 * When loading would pass the budget, the least recently used idle versions are unloaded first;
 * when that cannot free enough, the load fails with MEMORY_BUDGET_EXCEEDED.
 */

export type VersionState = 'unloaded' | 'loading' | 'ready' | 'unloading' | 'failed';

/** Memory assumed for a model that declares no resources.memory_mb. */
export const DEFAULT_MODEL_MEMORY_MB = 256;

export interface ManagerOptions {
  engines: Map<string, Engine>;
  maxQueue: number;
  /** Total resources.memory_mb x instances of the loaded versions; undefined: no limit. */
  memoryBudgetMb?: number;
  log: Logger;
  /** Called when a load ends, to persist the outcome. */
  onLoaded: (name: string, version: string, outcome: { info?: LoadInfo; error?: TensorgateError }) => void;
  /** Called when a version becomes ready, fails, or starts unloading: what is served changed. */
  onChange?: (name: string) => void;
}

export function memoryOf(config: ModelConfig): number {
  return (config.resources.memory_mb ?? DEFAULT_MODEL_MEMORY_MB) * config.resources.instances;
}

/**
 * The config of a PyTorch version's ONNX export, as the onnx engine runs it: the same tensors,
 * batching, queue and instances, the .onnx file as the version, fp32 only.
 */
export function onnxVariantConfig(config: ModelConfig, version: string): ModelConfig | undefined {
  const v = config.versions[version];
  if (config.engine !== 'torch' || v === undefined || v.format === 'remote' || v.onnx === undefined) return undefined;
  return {
    ...config,
    engine: 'onnx',
    parameters: { precision: ['fp32'] },
    optimization: { ...config.optimization, torch: 'none' },
    versions: { [version]: { format: 'onnx', file: v.onnx } },
  };
}

export class ModelManager {
  private readonly pools = new Map<string, ModelPool>();
  /** Per loaded version: its variants (the primary pool's, and an onnx pool when it has an export). */
  private readonly variantSets = new Map<string, VersionVariants>();
  private readonly unloading = new Map<string, Promise<void>>();

  constructor(private readonly options: ManagerOptions) {}

  pool(name: string, version: string): ModelPool | undefined {
    return this.pools.get(key(name, version));
  }

  /** The variants of a loaded (or loading) version: routing, reports and the engine choice. */
  variants(name: string, version: string): VersionVariants | undefined {
    return this.variantSets.get(key(name, version));
  }

  state(name: string, version: string): VersionState {
    const pool = this.pools.get(key(name, version));
    if (pool) return pool.state === 'closed' ? 'unloading' : pool.state;
    return this.unloading.has(key(name, version)) ? 'unloading' : 'unloaded';
  }

  get memoryUsedMb(): number {
    let total = 0;
    for (const pool of this.pools.values()) if (pool.state !== 'failed') total += memoryOf(pool.spec.config);
    return total;
  }

  /**
   * Starts loading a version (after making room under the budget) and returns its pool at once;
   * requests sent to the pool wait in its queue until it is ready. An existing pool is returned.
   */
  startLoad(name: string, version: string, dir: string, config: ModelConfig): ModelPool {
    const existing = this.pools.get(key(name, version));
    if (existing && existing.state !== 'failed') return existing;
    const engine = this.options.engines.get(config.engine);
    if (!engine) throw tgError('UNSUPPORTED_FORMAT', `engine "${config.engine}" is not available`);
    this.makeRoom(memoryOf(config), `${name}@${version}`);
    const pool = new ModelPool(
      engine,
      { config, version, dir },
      { maxQueue: this.options.maxQueue, onLog: this.options.log },
    );
    this.pools.set(key(name, version), pool);
    const onnxConfig = onnxVariantConfig(config, version);
    const onnxEngine = this.options.engines.get('onnx');
    const onnx =
      onnxConfig && onnxEngine
        ? new ModelPool(
            onnxEngine,
            { config: onnxConfig, version, dir },
            { maxQueue: this.options.maxQueue, onLog: this.options.log },
          )
        : undefined;
    const variants = new VersionVariants(pool, onnx, this.options.log);
    this.variantSets.set(key(name, version), variants);
    this.options.log(`loading ${name}@${version} (${config.versions[version]?.format}, ${config.resources.device})`, {
      model: name,
      version,
    });
    // The export loads beside the model; it is checked against it once both are up.
    onnx?.start().catch(() => {});
    pool.start().then(
      (info) => {
        void variants.settle();
        this.options.log(
          `ready ${name}@${version} on ${info.device}: load ${info.loadMs.toFixed(1)} ms, warm-up ${info.warmupMs.toFixed(1)} ms`,
          { model: name, version, device: info.device },
        );
        this.options.onLoaded(name, version, { info });
        this.options.onChange?.(name);
      },
      (err: unknown) => {
        const error = asTensorgateError(err);
        // Unloaded before it was ready (unload_model, the server stopping): nothing failed.
        const unloaded = error.code === 'SHUTTING_DOWN';
        this.options.log(unloaded ? error.message : `failed ${name}@${version}: ${error.message}`, {
          level: unloaded ? 'info' : 'error',
          model: name,
          version,
          code: error.code,
        });
        this.options.onLoaded(name, version, { error });
        this.options.onChange?.(name);
        void onnx?.close();
      },
    );
    return pool;
  }

  /**
   * Loads a version and resolves when it is ready (or rejects with why it is not); with
   * `variants`, once its variants are checked and their latencies measured too.
   */
  async load(
    name: string,
    version: string,
    dir: string,
    config: ModelConfig,
    { variants = true } = {},
  ): Promise<ModelPool> {
    const pool = this.startLoad(name, version, dir, config);
    await pool.start().catch(() => {});
    if (pool.state === 'closed') throw tgError('SHUTTING_DOWN', `${name}@${version} was unloaded while it loaded`);
    if (pool.state !== 'ready') throw pool.error ?? tgError('MODEL_NOT_READY', `${name}@${version} did not load`);
    if (variants) await this.variantSets.get(key(name, version))?.measured();
    return pool;
  }

  /** Unloads versions of a model (all when `version` is undefined), letting running work finish. */
  async unload(name: string, version?: string, graceMs = 0): Promise<void> {
    const closing: Promise<void>[] = [];
    for (const [k, pool] of this.pools) {
      if (k.startsWith(`${name}@`) && (version === undefined || pool.spec.version === version)) {
        closing.push(this.close(k, pool, graceMs));
      }
    }
    await Promise.allSettled(closing);
  }

  async closeAll(graceMs: number): Promise<void> {
    await Promise.allSettled([...this.pools].map(([k, pool]) => this.close(k, pool, graceMs)));
  }

  private close(k: string, pool: ModelPool, graceMs: number): Promise<void> {
    this.pools.delete(k);
    const onnx = this.variantSets.get(k)?.onnx;
    this.variantSets.delete(k);
    const done = Promise.all([pool.close(graceMs), onnx?.close(graceMs)])
      .then(() => {})
      .finally(() => this.unloading.delete(k));
    this.unloading.set(k, done);
    this.options.log(`unloading ${k}`, { model: pool.spec.config.name, version: pool.spec.version });
    this.options.onChange?.(pool.spec.config.name);
    return done;
  }

  /** Unloads least recently used idle versions until `needMb` more fits in the budget. */
  private makeRoom(needMb: number, label: string): void {
    const budget = this.options.memoryBudgetMb;
    if (budget === undefined) return;
    if (needMb > budget) {
      throw tgError(
        'MEMORY_BUDGET_EXCEEDED',
        `${label} needs ${needMb} MB, more than the whole ${budget} MB memory budget; raise --memory-budget-mb or lower resources.memory_mb`,
        { needMb, budgetMb: budget },
      );
    }
    let used = this.memoryUsedMb;
    if (used + needMb <= budget) return;
    const idle = [...this.pools]
      .filter(([, pool]) => pool.state === 'ready' && pool.idle)
      .sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    const evict: [string, ModelPool][] = [];
    for (const entry of idle) {
      if (used + needMb <= budget) break;
      evict.push(entry);
      used -= memoryOf(entry[1].spec.config);
    }
    if (used + needMb > budget) {
      throw tgError(
        'MEMORY_BUDGET_EXCEEDED',
        `${label} needs ${needMb} MB but only ${budget - this.memoryUsedMb} MB of the ${budget} MB budget is free and no idle model can be unloaded; unload one (unload_model) or retry when one is idle`,
        { needMb, budgetMb: budget, usedMb: this.memoryUsedMb },
      );
    }
    for (const [k, pool] of evict) {
      this.options.log(
        `unloading ${k} (least recently used, idle ${Math.round(performance.now() - pool.lastUsed)} ms) to fit ${label}`,
        { model: pool.spec.config.name, version: pool.spec.version },
      );
      void this.close(k, pool, 0);
    }
  }
}

function key(name: string, version: string): string {
  return `${name}@${version}`;
}
