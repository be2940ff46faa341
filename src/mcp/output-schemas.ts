import type { McpServer, RegisteredTool } from '@modelcontextprotocol/server';

/**
 * Over HTTP a server is built per request, and the SDK converts a tool's output schema to JSON
 * Schema lazily per registered tool, so every call would convert it again (~0.2 ms for infer).
 * The schemas never change: convert each once per process and hand the result to every server.
 */
const outputSchemaJson = new Map<string, Record<string, unknown> | undefined>();

function shareOutputSchema(name: string, tool: RegisteredTool): void {
  if (outputSchemaJson.has(name)) tool.outputSchemaJson = outputSchemaJson.get(name);
  else outputSchemaJson.set(name, tool.outputSchemaJson);
}

/** `server.registerTool` with the tool's output schema shared as above: what every tool file registers with. */
export function schemaSharingRegistrar(server: McpServer): McpServer['registerTool'] {
  return ((name: string, config: never, cb: never) => {
    const tool = server.registerTool(name, config, cb);
    shareOutputSchema(name, tool);
    return tool;
  }) as McpServer['registerTool'];
}
