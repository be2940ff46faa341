import type { EngineRequest, EngineResponse, NamedInput, NamedTensor } from '../engines/engine.js';
import { tgError } from '../errors.js';
import type { SinkRows, TensorSource } from '../tensor/source.js';

/**
 * Joining requests into one batch and splitting the answer again. Inputs are joined without
 * copying anything up front: the joined input is a TensorSource that fills each request's rows
 * straight into its part of the shared-memory slot, so a batch costs no copy beyond what a single
 * request does. Outputs are split into views of the one buffer read back from the worker; each
 * member's output sinks take its own rows of the batch's outputs.
 */

/** Rows a request contributes (its inputs' shared first dimension), or undefined if it cannot join a batch. */
export function batchRows(request: EngineRequest): number | undefined {
  const first = request.inputs[0]?.tensor.shape[0];
  if (first === undefined) return undefined;
  const same = request.inputs.every((i) => i.tensor.shape.length > 0 && i.tensor.shape[0] === first);
  return same ? first : undefined;
}

/** Requests with equal keys can share a forward pass: same precision, dtypes and non-batch dims. */
export function batchKey(request: EngineRequest): string {
  const parts = request.inputs.map((i) =>
    i.tensor.bytes ? 'bytes' : `${i.tensor.dtype}[${i.tensor.shape.slice(1).join(',')}]`,
  );
  return `${request.precision}|${parts.join('|')}`;
}

/** One request whose inputs are the given requests' inputs, stacked along dimension 0 in order. */
export function joinRequests(requests: EngineRequest[]): EngineRequest {
  const head = requests[0];
  if (!head) throw new Error('joinRequests needs at least one request');
  if (requests.length === 1) return head;
  const inputs: NamedInput[] = head.inputs.map((input, i) => ({
    name: input.name,
    tensor: stack(requests.map((r) => (r.inputs[i] as NamedInput).tensor)),
  }));
  const sinks: SinkRows[] = [];
  let first = 0;
  for (const request of requests) {
    const rows = batchRows(request) ?? 0;
    for (const { sink, row, rows: taken } of request.sinks ?? [])
      sinks.push({ sink, row: first + row, rows: taken ?? rows - row });
    first += rows;
  }
  return { inputs, precision: head.precision, ...(sinks.length > 0 ? { sinks } : {}) };
}

function stack(parts: TensorSource[]): TensorSource {
  const first = parts[0] as TensorSource;
  const rows = parts.reduce((sum, p) => sum + (p.shape[0] as number), 0);
  return {
    dtype: first.dtype,
    shape: [rows, ...first.shape.slice(1)],
    byteLength: parts.reduce((sum, p) => sum + p.byteLength, 0),
    // Length-prefixed items concatenate into the items of both: BYTES join like any tensor.
    ...(first.bytes ? { bytes: true as const } : {}),
    parts,
    fill(target) {
      let offset = 0;
      for (const part of parts) {
        part.fill(target.subarray(offset, offset + part.byteLength));
        offset += part.byteLength;
      }
    },
  };
}

/** Splits a batched response into one per request, each output cut along dimension 0 by `rows`. */
export function splitResponse(response: EngineResponse, rows: number[]): EngineResponse[] {
  const total = rows.reduce((a, b) => a + b, 0);
  const perRequest: NamedTensor[][] = rows.map(() => []);
  for (const { name, tensor, written } of response.outputs) {
    if (tensor.shape[0] !== total) {
      throw tgError(
        'INFERENCE_FAILED',
        `output "${name}" has ${tensor.shape[0]} rows for a batch of ${total}; a batched model must return one row per input row`,
        { output: name },
      );
    }
    const rowBytes = total === 0 ? 0 : tensor.data.byteLength / total;
    let row = 0;
    rows.forEach((n, i) => {
      const data = tensor.data.subarray(row * rowBytes, (row + n) * rowBytes);
      (perRequest[i] as NamedTensor[]).push({
        name,
        tensor: { dtype: tensor.dtype, shape: [n, ...tensor.shape.slice(1)], data },
        ...(written ? { written } : {}),
      });
      row += n;
    });
  }
  const answers = response.answers;
  if (answers && answers.length !== total)
    throw tgError(
      'HANDLER_FAILED',
      `the processing handler answered ${answers.length} items for a batch of ${total}; it must answer one per item`,
    );
  const geometry = response.geometry && Object.entries(response.geometry);
  let start = 0;
  return perRequest.map((outputs, i) => {
    const n = rows[i] as number;
    const part = {
      outputs,
      timings: response.timings,
      ...(answers ? { answers: answers.slice(start, start + n) } : {}),
      ...(geometry
        ? { geometry: Object.fromEntries(geometry.map(([input, items]) => [input, items.slice(start, start + n)])) }
        : {}),
    };
    start += n;
    return part;
  });
}
