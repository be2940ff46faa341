import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { LineTransport } from '../../../src/mcp/line-transport.js';

function setup(maxBytes?: number) {
  const input = new PassThrough();
  const output = new PassThrough();
  const transport = new LineTransport(input, output, maxBytes);
  const messages: unknown[] = [];
  const errors: Error[] = [];
  transport.onmessage = (m) => messages.push(m);
  transport.onerror = (e) => errors.push(e);
  return { input, output, transport, messages, errors };
}

const tick = () => new Promise((r) => setImmediate(r));

test('reassembles messages split across chunks and splits joined ones, with CRLF', async () => {
  const { input, transport, messages } = setup();
  await transport.start();
  const big = 'x'.repeat(300_000);
  const wire = Buffer.from(
    `{"jsonrpc":"2.0","id":1,"method":"ping"}\r\n{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","arguments":{"b":"${big}"}}}\n{"jsonrpc":"2.0","method":"notifications/initialized"}\n`,
  );
  for (let i = 0; i < wire.length; i += 65_536) input.write(wire.subarray(i, i + 65_536));
  await tick();
  assert.equal(messages.length, 3);
  assert.deepEqual(messages[0], { jsonrpc: '2.0', id: 1, method: 'ping' });
  assert.equal((messages[1] as { params: { arguments: { b: string } } }).params.arguments.b.length, 300_000);
});

test('reports a bad line and keeps reading the next one', async () => {
  const { input, transport, messages, errors } = setup();
  await transport.start();
  input.write('{not json\n{"jsonrpc":"2.0","id":3,"method":"ping"}\n');
  await tick();
  assert.equal(errors.length, 1);
  assert.deepEqual(messages, [{ jsonrpc: '2.0', id: 3, method: 'ping' }]);
});

test('drops a message over the size limit instead of buffering without bound', async () => {
  const { input, transport, messages, errors } = setup(1000);
  await transport.start();
  input.write(`{"jsonrpc":"2.0","id":4,"method":"x","params":{"p":"${'y'.repeat(5000)}`);
  input.write('"}}\n{"jsonrpc":"2.0","id":5,"method":"ping"}\n');
  await tick();
  assert.match(errors[0]?.message ?? '', /exceeded 1000 bytes/);
  assert.deepEqual(messages.at(-1), { jsonrpc: '2.0', id: 5, method: 'ping' });
});

test('writes one line per message and closes on end of input', async () => {
  const { input, output, transport } = setup();
  let closed = false;
  transport.onclose = () => {
    closed = true;
  };
  await transport.start();
  await transport.send({ jsonrpc: '2.0', id: 1, result: {} });
  assert.equal(output.read().toString(), '{"jsonrpc":"2.0","id":1,"result":{}}\n');
  input.end();
  await tick();
  assert.equal(closed, true);
});
