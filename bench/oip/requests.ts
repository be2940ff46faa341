import { rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';

/**
 * OIP v2 requests as the benchmarks send them: the same bytes to tensorgate and to KServe. One
 * input tensor of float32 in, one output tensor named in the request out.
 */

export interface Prepared {
  body: Buffer;
  headers: Record<string, string | number>;
}

export interface OipTensors {
  input: string;
  output: string;
  shape: number[];
  /** Bytes of one answer's output tensor (the size of a shared-memory output region). */
  outputBytes: number;
}

function bytesOf(data: Float32Array): Buffer {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

/** v2 JSON: the tensor as a flat `data` array; JSON outputs. */
export function jsonRequest(t: OipTensors, data: Float32Array): Prepared {
  const body = { inputs: [{ name: t.input, shape: t.shape, datatype: 'FP32', data: Array.from(data) }] };
  return { body: Buffer.from(JSON.stringify(body)), headers: { 'content-type': 'application/json' } };
}

/** v2 binary tensor data (the tritonclient extension): the raw bytes after a JSON header; binary outputs. */
export function binaryRequest(t: OipTensors, data: Float32Array, parameters?: Record<string, string>): Prepared {
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name: t.input, shape: t.shape, datatype: 'FP32', parameters: { binary_data_size: data.byteLength } }],
      outputs: [{ name: t.output, parameters: { binary_data: true } }],
      ...(parameters && Object.keys(parameters).length > 0 ? { parameters } : {}),
    }),
  );
  return {
    body: Buffer.concat([header, bytesOf(data)]),
    headers: { 'inference-header-content-length': header.length, 'content-type': 'application/octet-stream' },
  };
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/** POSTs a prepared body; resolves with 200, rejects with the status otherwise. */
export function post(base: string, path: string, prepared: Prepared, via: Agent = agent): Promise<number> {
  return exchange(base, path, prepared, via, false).then(() => 200);
}

/**
 * POSTs a prepared body and resolves with the answer's JSON header: the whole body of a JSON
 * answer, the first `Inference-Header-Content-Length` bytes of a binary one.
 */
export async function postForHeader(
  base: string,
  path: string,
  prepared: Prepared,
  via: Agent = agent,
): Promise<Record<string, unknown>> {
  const { body, headerLength } = await exchange(base, path, prepared, via, true);
  return JSON.parse(body.subarray(0, headerLength ?? body.length).toString('utf8')) as Record<string, unknown>;
}

function exchange(
  base: string,
  path: string,
  prepared: Prepared,
  via: Agent,
  keep: boolean,
): Promise<{ body: Buffer; headerLength: number | undefined }> {
  return new Promise((resolvePost, reject) => {
    const req = request(
      `${base}${path}`,
      { method: 'POST', agent: via, headers: { ...prepared.headers, 'content-length': prepared.body.length } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => {
          if (keep) chunks.push(chunk);
        });
        res.on('end', () => {
          if (res.statusCode !== 200) {
            reject(new Error(`${path}: HTTP ${res.statusCode}`));
            return;
          }
          const length = res.headers['inference-header-content-length'];
          resolvePost({ body: Buffer.concat(chunks), headerLength: length === undefined ? undefined : Number(length) });
        });
      },
    );
    req.on('error', reject);
    req.end(prepared.body);
  });
}

/**
 * System shared memory: the input written once into a region of its own, one output region per
 * client (answers must not overwrite each other), all registered with the server at `base`.
 * Returns one request per client and a cleanup that unlinks the regions' files.
 */
export async function sharedMemoryRequests(
  base: string,
  prefix: string,
  t: OipTensors,
  data: Float32Array,
  clients: number,
): Promise<{ requests: Prepared[]; cleanup: () => void }> {
  const keys: string[] = [];
  const cleanup = () => {
    for (const key of keys) rmSync(`/dev/shm${key}`, { force: true });
  };
  const register = async (name: string, bytes: Buffer) => {
    const key = `/tg_bench_${process.pid}_${name}`;
    writeFileSync(`/dev/shm${key}`, bytes);
    keys.push(key);
    await post(base, `/v2/systemsharedmemory/region/${name}/register`, {
      body: Buffer.from(JSON.stringify({ key, byte_size: bytes.length })),
      headers: {},
    });
  };
  try {
    await register(`${prefix}_in`, bytesOf(data));
    const region = (name: string, size: number) => ({ shared_memory_region: name, shared_memory_byte_size: size });
    const requests: Prepared[] = [];
    for (let i = 0; i < clients; i++) {
      await register(`${prefix}_out${i}`, Buffer.alloc(t.outputBytes));
      const body = {
        inputs: [
          { name: t.input, shape: t.shape, datatype: 'FP32', parameters: region(`${prefix}_in`, data.byteLength) },
        ],
        outputs: [{ name: t.output, parameters: region(`${prefix}_out${i}`, t.outputBytes) }],
      };
      requests.push({ body: Buffer.from(JSON.stringify(body)), headers: {} });
    }
    return { requests, cleanup };
  } catch (err) {
    cleanup();
    throw err;
  }
}
