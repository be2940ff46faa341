import { StdioServerTransport } from '@modelcontextprotocol/server/stdio';
import type { Gateway } from '../gateway.js';
import { createMcpServer } from './server.js';

/** MCP over stdin/stdout. Everything else the process prints must go to stderr. */
export async function serveStdio(gateway: Gateway): Promise<{ close: () => Promise<void> }> {
  const server = createMcpServer(gateway);
  const transport = new StdioServerTransport();
  await server.connect(transport);
  return { close: () => server.close() };
}
