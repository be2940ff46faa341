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
 * converts a tool's schemas to JSON Schema lazily per server: its output schema for every call's
 * result, its input schema for the 2026-07-28 entry's header check before dispatch (~0.13 ms of an
 * `infer` call). The definitions never change: each tool file hands its definition as a function,
 * called once per process, and its schemas convert to JSON Schema once (`convertedOnce`), so every
 * server after the first reuses both.
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

type JsonSchemaConverter = (options: { target: string }) => Record<string, unknown>;
const converted = new WeakSet<object>();

/**
 * The schema, its Standard JSON Schema conversions (`~standard.jsonSchema`, which the SDK calls)
 * made once per target and handed out again after. Only for schemas that never change after
 * this call, as a tool definition's; the SDK reads the results and copies their root, it does not
 * write into them.
 */
export function convertedOnce<Schema extends StandardSchemaWithJSON | undefined>(schema: Schema): Schema {
  if (schema === undefined || converted.has(schema)) return schema;
  converted.add(schema);
  const standard = schema['~standard'];
  const memo = (convert: JsonSchemaConverter): JsonSchemaConverter => {
    const done = new Map<string, Record<string, unknown>>();
    return (options) => {
      let json = done.get(options.target);
      if (!json) {
        json = convert(options);
        done.set(options.target, json);
      }
      return json;
    };
  };
  (schema as { '~standard': unknown })['~standard'] = {
    ...standard,
    jsonSchema: {
      input: memo(standard.jsonSchema.input as JsonSchemaConverter),
      output: memo(standard.jsonSchema.output as JsonSchemaConverter),
    },
  };
  return schema;
}

/**
 * An output schema as the SDK is handed it: the same JSON Schema advertised (converted once), and a
 * validation that takes the result as it is.
 *
 * The SDK checks a tool's structured result against its output schema before every answer, then
 * checks the whole result against the protocol's own schema. The first repeats what the client
 * does: an MCP client validates structured content against the schema the tool advertises (the
 * TypeScript SDK's `Client.callTool` does on every call, and the end-to-end suites call the tools
 * through it). For tensorgate's handlers, which build these results themselves, zod walking each
 * answer a second time cost about 0.03 ms of an `infer` call on the gateway's one thread.
 */
export function trustedOutput(schema: StandardSchemaWithJSON): StandardSchemaWithJSON {
  const standard = convertedOnce(schema)['~standard'];
  return { '~standard': { ...standard, validate: (value: unknown) => ({ value }) } };
}

/** A tool definition as the SDK is handed it: its output schema no longer a zod schema. */
export type Defined<Config extends AnyToolConfig> = Omit<Config, 'outputSchema'> & {
  outputSchema: undefined extends Config['outputSchema'] ? StandardSchemaWithJSON | undefined : StandardSchemaWithJSON;
};

/**
 * A tool definition whose schemas convert to JSON Schema once, its output schema trusted (above).
 * The object given keeps its own output schema, the zod one.
 */
export function definedOnce<Config extends AnyToolConfig>(config: Config): Defined<Config> {
  convertedOnce(config.inputSchema);
  const outputSchema = config.outputSchema && trustedOutput(config.outputSchema);
  return { ...config, outputSchema } as Defined<Config>;
}

function definitionOf<Config extends AnyToolConfig>(name: string, define: () => Config): Defined<Config> {
  let config = definitions.get(name) as Defined<Config> | undefined;
  if (!config) {
    config = definedOnce(define());
    definitions.set(name, config);
  }
  return config;
}

/**
 * `server.registerTool`, with the definition given as a function (built once per process, see
 * above): what every tool file registers with.
 */
export function schemaSharingRegistrar(server: McpServer) {
  return <Output extends StandardSchemaWithJSON, Input extends StandardSchemaWithJSON | undefined = undefined>(
    name: string,
    define: () => ToolConfig<Input, Output>,
    handler: ToolCallback<Input>,
  ): RegisteredTool => {
    return server.registerTool(name, definitionOf(name, define), handler);
  };
}
