import type { AuthInfo } from '@modelcontextprotocol/server';
import { type McpServer, ResourceTemplate } from '@modelcontextprotocol/server';
import { asTensorgateError, tgError } from '../errors.js';
import type { Gateway } from '../gateway.js';
import { encodeNpy } from '../tensor/npy.js';
import type { StoredTensor } from '../tensor/store.js';
import { callerOf } from './results.js';

/** The stored tensors whose source model (`model@version:output`) the caller may read. */
function readable(gateway: Gateway, caller: AuthInfo | undefined, entries: StoredTensor[]): StoredTensor[] {
  return entries.filter((e) => gateway.access.can(caller, 'read', 'model', e.source.split('@')[0] as string));
}

/**
 * Resources: the full tensors behind tensor:// handles (served as .npy, which numpy.load reads
 * directly) and each model's config. A resource read that fails raises, so the client sees a
 * JSON-RPC error with the tensorgate code in its message.
 */

export function registerResources(server: McpServer, gateway: Gateway): void {
  server.registerResource(
    'tensor',
    new ResourceTemplate('tensor://{id}', {
      list: async (ctx) => ({
        resources: readable(gateway, callerOf(ctx), gateway.store.list()).map((entry) => ({
          uri: entry.uri,
          name: entry.source,
          mimeType: 'application/x-npy',
          description: `${entry.tensor.dtype}[${entry.tensor.shape.join(', ')}] from ${entry.source}`,
        })),
      }),
    }),
    {
      title: 'Tensor',
      description: 'A full output tensor kept by the server for a while after the call that made it, as .npy.',
      mimeType: 'application/x-npy',
    },
    async (uri, _variables, ctx) => {
      try {
        const entry = gateway.store.get(uri.href);
        // A handle is a capability, but only for callers who may read the model that made it.
        if (readable(gateway, callerOf(ctx), [entry]).length === 0)
          throw tgError('HANDLE_NOT_FOUND', `no tensor ${uri.href}`);
        const npy = encodeNpy(entry.tensor);
        return { contents: [{ uri: uri.href, mimeType: 'application/x-npy', blob: npy.toString('base64') }] };
      } catch (err) {
        const error = asTensorgateError(err);
        throw new Error(`${error.code}: ${error.message}`);
      }
    },
  );

  server.registerResource(
    'model-config',
    new ResourceTemplate('tensorgate://models/{name}/config.json', {
      list: async (ctx) => ({
        resources: gateway
          .listModels()
          .filter((m) => gateway.access.can(callerOf(ctx), 'read', 'model', m.name))
          .map((m) => ({
            uri: `tensorgate://models/${m.name}/config.json`,
            name: `${m.name} config`,
            mimeType: 'application/json',
            description: m.description,
          })),
      }),
    }),
    { title: 'Model config', description: "A model's registered config.json.", mimeType: 'application/json' },
    async (uri, variables, ctx) => {
      try {
        gateway.access.check(callerOf(ctx), 'read', 'model', String(variables.name));
        const config = gateway.modelConfig(String(variables.name));
        return { contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify(config, null, 2) }] };
      } catch (err) {
        const error = asTensorgateError(err);
        throw new Error(`${error.code}: ${error.message}`);
      }
    },
  );
}
