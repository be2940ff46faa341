import http from 'node:http';
import https from 'node:https';
import { asTensorgateError, TensorgateError, tgError } from '../../errors.js';
import { dtypeOf, oipDatatype } from '../../oip/datatypes.js';
import { fromNestedArray } from '../../tensor/nested.js';
import { makeTensor, numel, type Tensor, toNumbers } from '../../tensor/tensor.js';
import type { NamedTensor } from '../engine.js';

/**
 * A small OIP v2 REST client for the remote engine: metadata, readiness and infer with binary
 * tensor data (or JSON lists), over keep-alive connections. Failures worth another attempt
 * (unreachable, reset, 502/503/504) are retried with exponential backoff; anything else fails at
 * once with the remote's own message.
 */

export interface OipClientOptions {
  url: string;
  model: string;
  version: string | undefined;
  binary: boolean;
  timeoutMs: number;
  retries: number;
  backoffMs: number;
  headers: Record<string, string>;
  /** Connections kept to the endpoint: the calls that may be in flight at once. */
  maxSockets: number;
}

export interface RemoteTensorSpec {
  name: string;
  datatype: string;
  shape: number[];
}

export interface RemoteMetadata {
  name: string;
  versions?: string[];
  platform?: string;
  inputs: RemoteTensorSpec[];
  outputs: RemoteTensorSpec[];
}

const HEADER_LENGTH = 'inference-header-content-length';
const RETRYABLE_STATUS = new Set([502, 503, 504]);

/** One HTTP request to the endpoint. */
interface Outgoing {
  method: 'GET' | 'POST';
  url: string;
  body?: Buffer;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
}

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export class OipClient {
  private readonly agent: http.Agent;
  private readonly base: string;

  constructor(private readonly opts: OipClientOptions) {
    const secure = opts.url.startsWith('https:');
    this.agent = new (secure ? https.Agent : http.Agent)({ keepAlive: true, maxSockets: opts.maxSockets });
    const version = opts.version ? `/versions/${encodeURIComponent(opts.version)}` : '';
    this.base = `${opts.url}/v2/models/${encodeURIComponent(opts.model)}${version}`;
  }

  /** Where calls go, for errors and describe_model. */
  get endpoint(): string {
    return this.base;
  }

  async metadata(): Promise<RemoteMetadata> {
    const reply = await this.send({ method: 'GET', url: this.base });
    if (reply.status !== 200) throw this.replyError(reply, 'metadata');
    const json = this.json(reply.body, 'metadata') as Partial<RemoteMetadata>;
    if (!Array.isArray(json.inputs) || !Array.isArray(json.outputs))
      throw this.garbage('metadata without "inputs" and "outputs" lists');
    return json as RemoteMetadata;
  }

  async ready(): Promise<boolean> {
    const reply = await this.send({ method: 'GET', url: `${this.base}/ready` });
    return reply.status === 200;
  }

  /** One inference; the outputs in the order asked for. */
  async infer(inputs: NamedTensor[], outputs: string[], signal?: AbortSignal): Promise<NamedTensor[]> {
    const { body, headers } = this.encode(inputs, outputs);
    const reply = await this.send({ method: 'POST', url: `${this.base}/infer`, body, headers, signal });
    if (reply.status !== 200) throw this.replyError(reply, 'infer');
    return this.decode(reply, outputs);
  }

  close(): void {
    this.agent.destroy();
  }

  private encode(inputs: NamedTensor[], outputs: string[]): { body: Buffer; headers: Record<string, string> } {
    const binary = this.opts.binary;
    const header = {
      inputs: inputs.map(({ name, tensor }) => ({
        name,
        shape: tensor.shape,
        datatype: oipDatatype(tensor.dtype),
        ...(binary
          ? { parameters: { binary_data_size: tensor.data.byteLength } }
          : {
              data:
                tensor.dtype === 'bool' ? Array.from(toNumbers(tensor), (v) => v !== 0) : Array.from(toNumbers(tensor)),
            }),
      })),
      outputs: outputs.map((name) => ({ name, parameters: { binary_data: binary } })),
    };
    const json = Buffer.from(JSON.stringify(header));
    if (!binary) return { body: json, headers: { 'content-type': 'application/json' } };
    return {
      body: Buffer.concat([json, ...inputs.map(({ tensor }) => tensor.data)]),
      headers: { 'content-type': 'application/octet-stream', [HEADER_LENGTH]: String(json.length) },
    };
  }

  private decode(reply: Reply, wanted: string[]): NamedTensor[] {
    const lengthHeader = reply.headers[HEADER_LENGTH];
    const jsonLength = lengthHeader === undefined ? reply.body.length : Number(lengthHeader);
    if (!Number.isInteger(jsonLength) || jsonLength < 0 || jsonLength > reply.body.length)
      throw this.garbage(`an ${HEADER_LENGTH} of ${lengthHeader} for a ${reply.body.length}-byte body`);
    const json = this.json(reply.body.subarray(0, jsonLength), 'infer') as {
      outputs?: {
        name?: unknown;
        datatype?: unknown;
        shape?: unknown;
        data?: unknown;
        parameters?: { binary_data_size?: unknown };
      }[];
    };
    if (!Array.isArray(json.outputs)) throw this.garbage('an infer response without an "outputs" list');
    let cursor = jsonLength;
    const got = new Map<string, Tensor>();
    for (const out of json.outputs) {
      const name = String(out.name);
      const dtype = dtypeOf(out.datatype);
      if (typeof dtype !== 'string') throw this.garbage(`output "${name}": ${dtype.reason}`);
      const shape = out.shape;
      if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0))
        throw this.garbage(`output "${name}" has shape ${JSON.stringify(shape)}`);
      const size = out.parameters?.binary_data_size;
      if (size !== undefined) {
        if (typeof size !== 'number' || !Number.isInteger(size) || size < 0 || cursor + size > reply.body.length)
          throw this.garbage(
            `output "${name}" claims ${String(size)} binary bytes; the body has ${reply.body.length - cursor} left`,
          );
        const tensor = makeTensor(dtype, shape as number[], reply.body.subarray(cursor, cursor + size));
        cursor += size;
        got.set(name, tensor);
        continue;
      }
      const tensor = fromNestedArray(out.data, dtype);
      if (numel(tensor.shape) !== numel(shape as number[]))
        throw this.garbage(`output "${name}" holds ${numel(tensor.shape)} values for shape [${shape.join(', ')}]`);
      got.set(name, { ...tensor, shape: shape as number[] });
    }
    return wanted.map((name) => {
      const tensor = got.get(name);
      if (!tensor) throw this.garbage(`no output "${name}" in the response (it has ${[...got.keys()].join(', ')})`);
      return { name, tensor };
    });
  }

  private json(bytes: Buffer, what: string): unknown {
    try {
      return JSON.parse(bytes.toString('utf8'));
    } catch {
      throw this.garbage(
        `${what} with something that is not JSON: ${JSON.stringify(bytes.subarray(0, 80).toString('utf8'))}`,
      );
    }
  }

  private garbage(what: string): TensorgateError {
    return tgError('REMOTE_ERROR', `${this.base} answered ${what}`, { endpoint: this.base });
  }

  private replyError(reply: Reply, what: string): TensorgateError {
    let message = reply.body.subarray(0, 500).toString('utf8');
    try {
      const parsed = JSON.parse(message) as { error?: unknown };
      if (typeof parsed.error === 'string') message = parsed.error;
    } catch {
      // Not JSON: quote what came.
    }
    const code = RETRYABLE_STATUS.has(reply.status) ? 'REMOTE_UNAVAILABLE' : 'REMOTE_ERROR';
    return tgError(code, `${what} at ${this.base} answered HTTP ${reply.status}: ${message}`, {
      endpoint: this.base,
      status: reply.status,
    });
  }

  /** One request, retried with backoff while its failures are worth retrying. */
  private async send(outgoing: Outgoing): Promise<Reply> {
    for (let attempt = 0; ; attempt++) {
      try {
        const reply = await this.once(outgoing);
        if (!RETRYABLE_STATUS.has(reply.status) || attempt >= this.opts.retries) return reply;
      } catch (err) {
        const error = asTensorgateError(err);
        if (error.code !== 'REMOTE_UNAVAILABLE' || attempt >= this.opts.retries) throw error;
      }
      await sleep(this.opts.backoffMs * 2 ** attempt, outgoing.signal);
    }
  }

  private once({ method, url, body, headers = {}, signal }: Outgoing): Promise<Reply> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(asTensorgateError(signal.reason));
        return;
      }
      const request = (url.startsWith('https:') ? https : http).request(url, {
        method,
        agent: this.agent,
        headers: { ...this.opts.headers, ...headers, ...(body ? { 'content-length': String(body.length) } : {}) },
        timeout: this.opts.timeoutMs,
        signal,
      });
      request.on('response', (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', (err) => reject(this.unreachable(err)));
      });
      request.on('timeout', () =>
        request.destroy(
          tgError('REMOTE_UNAVAILABLE', `${url} did not answer within ${this.opts.timeoutMs} ms`, {
            endpoint: this.base,
          }),
        ),
      );
      request.on('error', (err) => reject(err instanceof TensorgateError ? err : this.unreachable(err, signal)));
      request.end(body);
    });
  }

  private unreachable(err: Error, signal?: AbortSignal): TensorgateError {
    if (signal?.aborted) return asTensorgateError(signal.reason);
    return tgError('REMOTE_UNAVAILABLE', `${this.base} is unreachable: ${err.message}`, { endpoint: this.base });
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        reject(asTensorgateError(signal.reason));
      },
      { once: true },
    );
  });
}
