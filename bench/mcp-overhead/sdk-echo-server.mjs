#!/usr/bin/env node
/**
 * The MCP SDK's own floor: an McpServer over the SDK's StdioServerTransport with one tool, `infer`,
 * that takes the same arguments as tensorgate's (model + inputs, validated by the same kind of zod
 * schema) and answers at once with a small text result. No model, no tensor decoding: what the
 * SDK costs to carry a call, so that run.ts can tell SDK cost from tensorgate's own.
 */
import { McpServer } from '@modelcontextprotocol/server';
import { StdioServerTransport } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';

const server = new McpServer({ name: 'sdk-echo', version: '0.0.0' });
server.registerTool(
  'infer',
  {
    description: 'Accepts an inference request and does nothing with it.',
    inputSchema: z.object({ model: z.string(), inputs: z.record(z.string(), z.unknown()) }),
    annotations: { readOnlyHint: true },
  },
  async ({ model }) => ({ content: [{ type: 'text', text: `${model}: ok` }] }),
);
await server.connect(new StdioServerTransport());
