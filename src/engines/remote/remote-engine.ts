import { tgError } from '../../errors.js';
import { oipDatatype } from '../../oip/datatypes.js';
import type { ModelConfig, RemoteConfig, TensorSpec } from '../../registry/model-config.js';
import { readSource } from '../../tensor/source.js';
import type {
  Engine,
  EngineInstance,
  EngineRequest,
  EngineResponse,
  LoadInfo,
  ModelVersionSpec,
  NamedTensor,
} from '../engine.js';
import { OipClient, type RemoteMetadata, type RemoteTensorSpec } from './oip-client.js';

/**
 * The remote engine: a model version served by another OIP v2 endpoint (KServe, Triton,
 * TorchServe in kservev2 mode, another tensorgate). Its instances are connections, not processes:
 * `resources.instances` is how many calls may be in flight to the endpoint, and the scheduler's
 * batching, queue limits, timeouts and metrics apply as to a local model. Starting an instance
 * checks the endpoint's metadata against the local config and that it is ready.
 */
export class RemoteEngine implements Engine {
  readonly name = 'remote';

  createInstance(spec: ModelVersionSpec, index: number): EngineInstance {
    return new RemoteInstance(spec, index);
  }
}

/** Header values "env:NAME" read from the environment when the instance starts. */
function resolveHeaders(model: string, headers: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!value.startsWith('env:')) {
      out[name] = value;
      continue;
    }
    const variable = value.slice(4);
    const resolved = process.env[variable];
    if (resolved === undefined)
      throw tgError('INVALID_CONFIG', `${model}: remote header "${name}" reads $${variable}, which is not set`, {
        header: name,
      });
    out[name] = resolved;
  }
  return out;
}

class RemoteInstance implements EngineInstance {
  readonly label: string;
  private readonly client: OipClient;
  private readonly remote: RemoteConfig;

  constructor(
    private readonly spec: ModelVersionSpec,
    index: number,
  ) {
    const { config, version } = spec;
    const v = config.versions[version];
    if (!config.remote || v?.format !== 'remote')
      throw tgError('INVALID_CONFIG', `${config.name}@${version} is not a remote model version`);
    this.remote = config.remote;
    this.label = `${config.name}@${version}#${index} -> ${config.remote.url}`;
    this.client = new OipClient({
      url: config.remote.url,
      model: config.remote.model ?? config.name,
      version: v.version,
      binary: config.remote.binary,
      timeoutMs: config.remote.timeout_ms,
      retries: config.remote.retries,
      backoffMs: config.remote.backoff_ms,
      headers: resolveHeaders(config.name, config.remote.headers),
      maxSockets: 1,
    });
  }

  async start(): Promise<LoadInfo> {
    const start = performance.now();
    const metadata = await this.client.metadata();
    checkMetadata(this.spec.config, metadata, this.client.endpoint);
    if (!(await this.client.ready()))
      throw tgError('REMOTE_UNAVAILABLE', `${this.client.endpoint} is not ready`, { endpoint: this.client.endpoint });
    return {
      device: `remote:${this.remote.url}`,
      loadMs: performance.now() - start,
      warmupMs: 0,
      weightsBytes: 0,
      runtime: `OIP v2 ${metadata.platform ?? 'endpoint'} ${this.client.endpoint}`,
      variants: [
        { precision: 'fp32', engine: 'remote', method: `called as it is at ${this.client.endpoint}`, state: 'ready' },
      ],
    };
  }

  async infer(request: EngineRequest): Promise<EngineResponse> {
    const fillStart = performance.now();
    // Inputs already in memory go as they are; those read lazily (base64, files) are read here.
    const inputs: NamedTensor[] = request.inputs.map(({ name, tensor }) => ({ name, tensor: readSource(tensor) }));
    const sent = performance.now();
    const outputs = await this.client.infer(
      inputs,
      this.spec.config.outputs.map((o) => o.name),
    );
    // The whole round trip is the remote's compute as far as this gateway can tell.
    return { outputs, timings: { fillMs: sent - fillStart, transferMs: 0, computeMs: performance.now() - sent } };
  }

  onCrash(): void {
    // Nothing to crash: a remote that fails answers each call with an error instead.
  }

  async close(): Promise<void> {
    this.client.close();
  }
}

function shapesFit(local: number[], remote: number[]): boolean {
  return local.length === remote.length && local.every((d, i) => d === -1 || remote[i] === -1 || d === remote[i]);
}

/** Every local input and output the remote declares must exist there with the same datatype and a shape that fits. */
function checkMetadata(config: ModelConfig, metadata: RemoteMetadata, endpoint: string): void {
  const problems: string[] = [];
  const compare = (kind: 'input' | 'output', local: TensorSpec[], remote: RemoteTensorSpec[]) => {
    for (const spec of local) {
      const other = remote.find((r) => r.name === spec.name);
      if (!other) {
        problems.push(`${kind} "${spec.name}" is missing remotely (it has ${remote.map((r) => r.name).join(', ')})`);
        continue;
      }
      if (other.datatype !== oipDatatype(spec.dtype))
        problems.push(`${kind} "${spec.name}" is ${other.datatype} remotely, ${oipDatatype(spec.dtype)} here`);
      if (!Array.isArray(other.shape) || !shapesFit(spec.shape, other.shape))
        problems.push(`${kind} "${spec.name}" has shape [${other.shape}] remotely, [${spec.shape}] here`);
    }
  };
  // A side the remote leaves empty (KServe's custom models declare none) cannot be checked: the
  // calls themselves will tell. A side it declares must agree.
  if (metadata.inputs.length > 0) compare('input', config.inputs, metadata.inputs);
  if (metadata.outputs.length > 0) compare('output', config.outputs, metadata.outputs);
  // Inputs the remote needs and this config does not send would fail every call.
  for (const r of metadata.inputs)
    if (!config.inputs.some((s) => s.name === r.name))
      problems.push(`the remote takes input "${r.name}", which this config does not declare`);
  if (problems.length)
    throw tgError('REMOTE_MISMATCH', `${config.name} and ${endpoint} disagree: ${problems.join('; ')}`, {
      endpoint,
      problems,
    });
}
