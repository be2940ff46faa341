/**
 * bench/fixed-cost's architecture floor: what a call costs tensorgate's process layout before any
 * of tensorgate's own work. A bare node:http server (no router, no validation, no logging) that
 * answers every POST with a fixed OIP-sized binary answer, either at once (`/echo`: the HTTP
 * floor) or after one round trip to a Python process over a socket pair on its fd 3, framed and
 * answered as the gateway and a torch worker frame and answer theirs (`/hop`, `/hop-spin`: the
 * worker side spinning as `resources.spin_us` would). Prints its base URL on stdout once listening.
 *
 *   node --import tsx bench/fixed-cost/hop-server.ts PYTHON SPIN_US
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, type ServerResponse } from 'node:http';
import { dirname, join, resolve } from 'node:path';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { encodeFrame, FrameDecoder } from '../../src/engines/torch/frame.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const [python = 'python3', spinUs = '0'] = process.argv.slice(2);

/** The size of tensorgate's OIP binary answer for the tabular model: a JSON header, then 12 bytes. */
const HEADER = Buffer.from(
  JSON.stringify({
    model_name: 'tabular-classifier',
    model_version: '1',
    outputs: [{ name: 'probabilities', datatype: 'FP32', shape: [1, 3], parameters: { binary_data_size: 12 } }],
  }),
);
const ANSWER = Buffer.concat([HEADER, Buffer.alloc(12)]);

/** One Python process on the far end of a socket pair, as a worker is. */
class Hop {
  private readonly child: ChildProcess;
  private readonly channel: Duplex;
  private readonly decoder = new FrameDecoder();
  private readonly waiting = new Map<number, () => void>();
  private nextId = 1;

  constructor(spin: string) {
    this.child = spawn(python, [join(HERE, 'hop_echo.py'), '--spin-us', spin], {
      stdio: ['ignore', 'inherit', 'inherit', 'pipe'],
      env: { ...process.env, PYTHONPATH: resolve(HERE, '../../python') },
    });
    this.channel = this.child.stdio[3] as Duplex;
    this.channel.on('data', (chunk: Buffer) => {
      for (const m of this.decoder.push(chunk)) {
        const id = (m as { id: number }).id;
        this.waiting.get(id)?.();
        this.waiting.delete(id);
      }
    });
  }

  /** The same header a gateway sends for the tabular model's one-row input. */
  call(): Promise<void> {
    const id = this.nextId++;
    return new Promise((done) => {
      this.waiting.set(id, done);
      this.channel.write(
        encodeFrame({
          op: 'infer',
          id,
          inputs: [{ name: 'features', dtype: 'float32', shape: [1, 4], offset: 0, nbytes: 16 }],
          parameters: { precision: 'fp32' },
        }),
      );
    });
  }

  close(): void {
    this.channel.end();
  }
}

const hops: Record<string, Hop> = { '/hop': new Hop('0'), '/hop-spin': new Hop(spinUs) };

function answer(res: ServerResponse): void {
  res.writeHead(200, {
    'content-type': 'application/octet-stream',
    'inference-header-content-length': HEADER.length,
    'content-length': ANSWER.length,
  });
  res.end(ANSWER);
}

const server = createServer((req, res) => {
  req.on('data', () => {});
  req.on('end', () => {
    const hop = hops[req.url ?? ''];
    if (hop) void hop.call().then(() => answer(res));
    else answer(res);
  });
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  if (address && typeof address === 'object') process.stdout.write(`http://127.0.0.1:${address.port}\n`);
});
process.on('SIGTERM', () => {
  for (const hop of Object.values(hops)) hop.close();
  server.close();
  server.closeAllConnections();
});
