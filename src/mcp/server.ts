import { McpServer } from '@modelcontextprotocol/server';
import type { Gateway } from '../gateway.js';
import { VERSION } from '../version.js';
import { registerResources } from './resources.js';
import { registerTools } from './tools.js';

/** Builds the MCP server over a Gateway. Cheap: HTTP builds one per request, stdio one per process. */
export function createMcpServer(gateway: Gateway): McpServer {
  const server = new McpServer(
    { name: 'tensorgate', version: VERSION },
    {
      instructions:
        'tensorgate serves PyTorch models. Call list_models, then describe_model to learn input names, dtypes and shapes, then infer. Outputs come back as summaries plus tensor:// handles you can pass as later inputs.',
    },
  );
  registerTools(server, gateway);
  registerResources(server, gateway);
  return server;
}
