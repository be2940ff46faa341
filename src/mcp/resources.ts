import { type McpServer, ResourceTemplate } from '@modelcontextprotocol/server';
import { asTensorgateError } from '../errors.js';
import type { Gateway } from '../gateway.js';
import { encodeNpy } from '../tensor/npy.js';

/**
 * Resources: the full tensors behind tensor:// handles (served as .npy, which numpy.load reads
 * directly) and each model's config. A resource read that fails raises, so the client sees a
 * JSON-RPC error with the tensorgate code in its message.
 */

export function registerResources(server: McpServer, gateway: Gateway): void {
  server.registerResource(
    'tensor',
    new ResourceTemplate('tensor://{id}', {
      list: async () => ({
        resources: gateway.store.list().map((entry) => ({
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
    async (uri) => {
      try {
        const entry = gateway.store.get(uri.href);
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
      list: async () => ({
        resources: gateway.listModels().map((m) => ({
          uri: `tensorgate://models/${m.name}/config.json`,
          name: `${m.name} config`,
          mimeType: 'application/json',
          description: m.description,
        })),
      }),
    }),
    { title: 'Model config', description: "A model's registered config.json.", mimeType: 'application/json' },
    async (uri, variables) => {
      try {
        const config = gateway.modelConfig(String(variables.name));
        return { contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify(config, null, 2) }] };
      } catch (err) {
        const error = asTensorgateError(err);
        throw new Error(`${error.code}: ${error.message}`);
      }
    },
  );
}
