import type { TensorgateError } from '../errors.js';
import type { StageTimings } from '../gateway.js';

/**
 * What the gateway tells whoever watches its requests (the request log, the tracer): one call per
 * request, when it has finished or failed. Times are `performance.now()` readings; the gateway
 * calls no observer at all when none is attached.
 */

/**
 * Where a request came from: an MCP tool, OIP v2 REST on the main port or on the data port
 * (`serve --oip-port`), OIP v2 gRPC, or a batch job's items.
 */
export type Adapter = 'mcp' | 'oip-rest' | 'oip-data' | 'oip-grpc' | 'job';

export interface FinishedRequest {
  request_id: string;
  model: string;
  version: string;
  adapter: Adapter | undefined;
  /** The variant that ran it: torch-fp32, torch-int8, onnx-fp32… */
  variant: string;
  /** Rows in the forward pass that served the request (more than its own when batched). */
  batch_size: number;
  /** The request's own rows. */
  rows: number;
  timings: StageTimings;
  /** When the gateway took the request. */
  startedAt: number;
  /** When input decoding began; the engine stages follow it. */
  decodeStartedAt: number;
  /** When output encoding began. */
  encodeStartedAt: number;
  endedAt: number;
}

export interface FailedRequest {
  /** Unknown when the adapter could not parse the request at all. */
  request_id: string | undefined;
  model: string | undefined;
  version: string | undefined;
  adapter: Adapter | undefined;
  error: TensorgateError;
  /** Known when the request reached the gateway's pipeline. */
  total_ms: number | undefined;
  endedAt: number;
}

export interface RequestObserver {
  finished(request: FinishedRequest): void;
  failed(request: FailedRequest): void;
}
