import type { AuthInfo, CallToolResult } from '@modelcontextprotocol/server';
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

/** The authenticated caller of a tool call or resource read (HTTP with auth on); undefined when local. */
export function callerOf(ctx: unknown): AuthInfo | undefined {
  return (ctx as { http?: { authInfo?: AuthInfo } } | undefined)?.http?.authInfo;
}
