import type { AuthInfo } from '@modelcontextprotocol/server';
import { tgError } from '../errors.js';
import type { Gateway } from '../gateway.js';
import { defaultVersion, type TensorSpec } from '../registry/model-config.js';
import { VERSION } from '../version.js';
import { oipDatatype } from './datatypes.js';

/**
 * What the OIP v2 REST routes and the gRPC service both answer, in the protocol's terms: one
 * implementation, two encodings.
 */

export const OIP_EXTENSIONS = ['binary_tensor_data', 'system_shared_memory', 'model_repository', 'statistics'];

export function serverMetadata() {
  return { name: 'tensorgate', version: VERSION, extensions: OIP_EXTENSIONS };
}

/** Ready to serve: not stopping, and no model still loading. */
export function serverReady(gateway: Gateway): boolean {
  return !gateway.closing && !gateway.listModels().some((m) => m.versions.some((v) => v.state === 'loading'));
}

export function checkVersion<T extends { version: string }>(versions: T[], model: string, version: string): T {
  const found = versions.find((v) => v.version === version);
  if (!found)
    throw tgError(
      'VERSION_NOT_FOUND',
      `${model} has no version ${version}; it has ${versions.map((v) => v.version).join(', ')}`,
      { model, version },
    );
  return found;
}

const tensorMetadata = (s: TensorSpec) => ({ name: s.name, datatype: oipDatatype(s.dtype), shape: s.shape });

export function modelMetadata(gateway: Gateway, model: string, version?: string) {
  const config = gateway.modelConfig(model);
  const info = gateway.modelInfo(config.name);
  if (version) checkVersion(info.versions, config.name, version);
  const format = config.versions[version || defaultVersion(config)]?.format;
  return {
    name: config.name,
    versions: version ? [version] : info.versions.map((v) => v.version),
    platform: format === 'torchscript' ? 'pytorch_libtorch' : 'pytorch',
    inputs: config.inputs.map(tensorMetadata),
    outputs: config.outputs.map(tensorMetadata),
  };
}

export function modelReady(gateway: Gateway, model: string, version?: string): boolean {
  const config = gateway.modelConfig(model);
  const info = gateway.modelInfo(config.name);
  return checkVersion(info.versions, config.name, version || defaultVersion(config)).state === 'ready';
}

/** The repository index; with a caller, only the models it may read. */
export function repositoryIndex(gateway: Gateway, caller?: AuthInfo) {
  const models = gateway.listModels().filter((m) => gateway.access.can(caller, 'read', 'model', m.name));
  return models.flatMap((m) =>
    m.versions.map((v) => ({
      name: m.name,
      version: v.version,
      state: v.state === 'ready' ? 'READY' : v.state === 'loading' ? 'LOADING' : 'UNAVAILABLE',
      reason: v.error ?? (v.state === 'ready' || v.state === 'loading' ? '' : v.state),
    })),
  );
}

/** The outputs a request names must exist; UNKNOWN_OUTPUT before any work is done. */
export function checkOutputs(gateway: Gateway, model: string, names: string[]): void {
  const config = gateway.modelConfig(model);
  for (const name of names) {
    if (!config.outputs.some((o) => o.name === name))
      throw tgError(
        'UNKNOWN_OUTPUT',
        `output "${name}" is not declared by ${config.name}; it has ${config.outputs.map((o) => o.name).join(', ')}`,
        { output: name },
      );
  }
}
