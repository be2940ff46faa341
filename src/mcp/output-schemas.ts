import type {
  McpServer,
  RegisteredTool,
  StandardSchemaWithJSON,
  ToolAnnotations,
  ToolCallback,
} from '@modelcontextprotocol/server';

/**
 * Over Streamable HTTP a server is built per request (the SDK's stateless era). Building each
 * tool's zod schemas again for every request cost ~0.4 ms of a call (and its garbage), and the SDK
 * converts a tool's output schema to JSON Schema lazily per registered tool, so every call would
 * convert it again (~0.2 ms for infer). The definitions never change: each tool file hands its
 * definition as a function, called once per process, and every server after the first reuses the
 * definition and its converted output schema.
 */
interface ToolConfig<Input extends StandardSchemaWithJSON | undefined, Output extends StandardSchemaWithJSON> {
  title?: string;
  description?: string;
  inputSchema?: Input;
  outputSchema?: Output;
  annotations?: ToolAnnotations;
}

type AnyToolConfig = ToolConfig<StandardSchemaWithJSON | undefined, StandardSchemaWithJSON>;

const definitions = new Map<string, AnyToolConfig>();
const outputSchemaJson = new Map<string, Record<string, unknown> | undefined>();

function definitionOf<Config extends AnyToolConfig>(name: string, define: () => Config): Config {
  let config = definitions.get(name) as Config | undefined;
  if (!config) {
    config = define();
    definitions.set(name, config);
  }
  return config;
}

function shareOutputSchema(name: string, tool: RegisteredTool): void {
  if (outputSchemaJson.has(name)) tool.outputSchemaJson = outputSchemaJson.get(name);
  else outputSchemaJson.set(name, tool.outputSchemaJson);
}

/**
 * `server.registerTool`, with the definition given as a function (built once per process, see
 * above) and the output schema shared: what every tool file registers with.
 */
export function schemaSharingRegistrar(server: McpServer) {
  return <Output extends StandardSchemaWithJSON, Input extends StandardSchemaWithJSON | undefined = undefined>(
    name: string,
    define: () => ToolConfig<Input, Output>,
    handler: ToolCallback<Input>,
  ): RegisteredTool => {
    const tool = server.registerTool(name, definitionOf(name, define), handler);
    shareOutputSchema(name, tool);
    return tool;
  };
}
