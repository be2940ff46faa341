import type { AuthInfo, CallToolResult, McpServer } from '@modelcontextprotocol/server';
import { asTensorgateError } from '../errors.js';

/** The one place TensorgateErrors become MCP tool results: `isError: true`, code and fix in the text. */
export function errorResult(err: unknown): CallToolResult {
  const error = asTensorgateError(err);
  return {
    isError: true,
    content: [{ type: 'text', text: `${error.code}: ${error.message}` }],
    _meta: { 'tensorgate/error': error.toJSON() },
  };
}

export function jsonResult(text: string, structured: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text }], structuredContent: structured };
}

/**
 * Who asked, for the audit log: the authenticated caller (`key:<id>`, `jwt:<sub>`) when there is
 * one, as access denials name it; else the MCP client's name.
 */
export function actorOf(server: McpServer, ctx: unknown): string {
  const caller = callerOf(ctx);
  if (caller) return caller.clientId;
  const client = server.server.getClientVersion();
  return client ? `mcp:${client.name}` : 'mcp';
}

/** The authenticated caller of a tool call or resource read (HTTP with auth on); undefined when local. */
export function callerOf(ctx: unknown): AuthInfo | undefined {
  return (ctx as { http?: { authInfo?: AuthInfo } } | undefined)?.http?.authInfo;
}
