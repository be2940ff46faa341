import { serveStdio as serveBothEras } from '@modelcontextprotocol/server/stdio';
import type { Gateway } from '../gateway.js';
import { LineTransport } from './line-transport.js';
import { createMcpServer } from './server.js';

/**
 * MCP over stdin/stdout, serving the 2026-07-28 revision and 2025-era clients alike (the SDK's
 * serveStdio negotiates the era). Everything else the process prints must go to stderr.
 */
export function serveStdio(gateway: Gateway): { close: () => Promise<void> } {
  return serveBothEras(() => createMcpServer(gateway, { live: true }), {
    transport: new LineTransport(process.stdin, process.stdout),
    onerror: (err) => process.stderr.write(`mcp stdio: ${err.message}\n`),
  });
}
