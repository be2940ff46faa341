import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * The HTTP connection behind the MCP request being handled, as an AbortSignal that fires when the
 * client goes away before the answer is written. The SDK's per-request HTTP transport does not
 * abort a tool's own signal promptly when the client disconnects, so the HTTP adapter records the
 * connection here and tools combine both signals: a request whose caller left is withdrawn.
 */
const connection = new AsyncLocalStorage<AbortSignal>();

export function runWithConnectionSignal<T>(signal: AbortSignal, fn: () => T): T {
  return connection.run(signal, fn);
}

/** The MCP request's own signal, combined with its HTTP connection's when there is one. */
export function requestSignal(mcpSignal: AbortSignal): AbortSignal {
  const closed = connection.getStore();
  return closed ? AbortSignal.any([mcpSignal, closed]) : mcpSignal;
}
