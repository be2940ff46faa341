import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { VERSION } from '../version.js';
import { DEFAULT_HTTP_PORT } from './serve.js';

/** Commands that act on a running server (load, unload) call its MCP tools over HTTP. */

export const DEFAULT_URL = `http://127.0.0.1:${DEFAULT_HTTP_PORT}/mcp`;

/** The bearer credential commands send to a server with auth on: $TENSORGATE_TOKEN (an API key or a JWT). */
export function authHeaders(): Record<string, string> {
  const token = process.env.TENSORGATE_TOKEN;
  return token ? { authorization: `Bearer ${token}` } : {};
}

export async function callServerTool(
  url: string,
  tool: string,
  args: Record<string, unknown>,
  /** Print the call's progress notifications to stderr as they come (a waiting job start). */
  options: { progress?: boolean } = {},
): Promise<void> {
  const client = new Client({ name: 'tensorgate-cli', version: VERSION });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: authHeaders() } }));
  } catch (err) {
    throw new Error(
      `cannot reach a tensorgate server at ${url} (${(err as Error).message}); start one with \`tensorgate serve\` or pass --url (with auth on, set TENSORGATE_TOKEN)`,
    );
  }
  try {
    const result = (await client.callTool(
      { name: tool, arguments: args },
      options.progress
        ? {
            onprogress: (p) => process.stderr.write(`${p.message ?? `${p.progress}/${p.total ?? '?'}`}\n`),
            // A long call stays open as long as it reports progress.
            resetTimeoutOnProgress: true,
          }
        : {},
    )) as {
      isError?: boolean;
      content: { type: string; text?: string }[];
    };
    const text = result.content
      .filter((c) => c.type === 'text')
      .map((c) => c.text)
      .join('\n');
    if (result.isError) {
      process.stderr.write(`tensorgate: ${text}\n`);
      process.exitCode = 1;
    } else {
      process.stdout.write(`${text}\n`);
    }
  } finally {
    await client.close();
  }
}
