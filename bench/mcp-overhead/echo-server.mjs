#!/usr/bin/env node
/**
 * The floor for inline data through JSON-RPC: newline-delimited JSON-RPC over stdio with no SDK
 * and no model. Reads a line, JSON.parse, answers a small result. With --decode it also decodes
 * params.arguments.inputs.*.b64 into bytes (what any server must do with inline base64).
 */
const decode = process.argv.includes('--decode');
let chunks = [];

function handle(line) {
  const msg = JSON.parse(line);
  let bytes = 0;
  if (decode) {
    for (const input of Object.values(msg.params?.arguments?.inputs ?? {})) {
      if (typeof input?.b64 === 'string') bytes += Buffer.from(input.b64, 'base64').byteLength;
    }
  }
  process.stdout.write(`${JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [], bytes } })}\n`);
}

process.stdin.on('data', (chunk) => {
  let start = 0;
  let nl = chunk.indexOf(10);
  while (nl !== -1) {
    chunks.push(chunk.subarray(start, nl));
    const line = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
    chunks = [];
    if (line.length > 0) handle(line.toString('utf8'));
    start = nl + 1;
    nl = chunk.indexOf(10, start);
  }
  if (start < chunk.length) chunks.push(chunk.subarray(start));
});
process.stdin.on('end', () => process.exit(0));
