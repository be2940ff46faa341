import type { Engine, EngineInstance, ModelVersionSpec } from '../engine.js';
import { TorchInstance, type TorchInstanceOptions } from './torch-instance.js';

/** The torch engine: each instance is a Python worker process running real PyTorch. */
export class TorchEngine implements Engine {
  readonly name = 'torch';

  constructor(private readonly options: TorchInstanceOptions = {}) {}

  createInstance(spec: ModelVersionSpec, index: number): EngineInstance {
    return new TorchInstance(spec, index, this.options);
  }
}
