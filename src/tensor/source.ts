import type { DType } from './dtype.js';
import { makeTensor, type Tensor } from './tensor.js';

/**
 * Input tensor bytes that are written straight into their destination once it is known: a
 * decoded request is validated (dtype, shape, byte length) up front, but base64 text or a .npy
 * file is only decoded or read when an engine hands over the shared-memory slot that the worker
 * will read. That saves a copy, and a fresh buffer (page faults, GC) per request.
 */
export interface TensorSource {
  readonly dtype: DType;
  readonly shape: number[];
  readonly byteLength: number;
  /**
   * A BYTES tensor (OIP v2's name): shape [items], dtype uint8, and the bytes are the items, each
   * a 4-byte little-endian length and then that many bytes. Processed inputs (image files) travel
   * so to the worker that decodes them; batches join them by concatenation like any tensor.
   */
  readonly bytes?: true;
  /** The bytes, when they are already in memory (arrays, handles, in-memory files). */
  readonly data?: Uint8Array;
  /** Writes exactly `byteLength` bytes into `target`; may throw a TensorgateError (bad data, file gone). */
  fill(target: Uint8Array): void;
  /**
   * Where an engine in another process may read the bytes itself instead of calling `fill`, so
   * that they never pass through this process's thread (see FileSpan). Engines that run here, or
   * cannot open the file, call `fill`.
   */
  readonly file?: FileSpan;
  /**
   * The sources this one is made of, back to back (a batch's requests, a BYTES tensor's items and
   * their lengths): an engine may place each part by itself.
   */
  readonly parts?: readonly TensorSource[];
}

/**
 * `byteLength` bytes at `position` of a file. Either `path` is `/proc/<pid>/fd/<fd>`, a descriptor
 * this process holds open for as long as the request runs (a shared-memory region: it reaches the
 * file opened at registration, not whatever a name points at by then); or, with `open`, `path` is
 * the file's own path (for errors and logs), and `open` the way to open it, which the engine calls
 * when it sends the request, closing the descriptor once answered, as `fill` would have (a `.npy`
 * file under the allowed roots, opened again only if it is still the file checked).
 */
export interface FileSpan {
  readonly path: string;
  /** Opens the file for reading: a descriptor the caller closes; throws a TensorgateError. */
  readonly open?: () => number;
  readonly position: number;
  /** The bytes as an error should name them: `input "x": region "r"`. */
  readonly what: string;
  /** The error code when the file no longer holds the span (default SHARED_MEMORY_OUT_OF_RANGE). */
  readonly truncated?: 'BAD_TENSOR' | 'SHARED_MEMORY_OUT_OF_RANGE';
  /**
   * Keeps `path` naming the same file for as long as an engine in another process may still open
   * it, which can outlast the request's answer (a request cancelled while it runs is answered at
   * once; its forward pass goes on): returns the release. Without it, a descriptor closed in the
   * meantime could be reused for another file. Unset where nothing closes the file before then.
   */
  readonly hold?: () => () => void;
}

/**
 * Where a request wants one output's bytes: up to `capacity` bytes at `position` of the file at
 * `path`, a `/proc/<pid>/fd/<fd>` descriptor this process holds until the engine is done with it (a
 * client's shared-memory region). An engine in another process may write the output there itself,
 * so that its bytes never pass through this process's thread, and then sets `written`; where it
 * does not, the caller writes the output from the response as before.
 */
export interface OutputSink {
  readonly output: string;
  readonly path: string;
  readonly position: number;
  readonly capacity: number;
  /** As FileSpan's. */
  readonly hold?: () => () => void;
  written: boolean;
}

/**
 * A sink and the rows of its output that go there, along dimension 0: `[row, row + rows)`, or
 * from `row` to the end. A request alone sends all of them; a batch, each member's own rows.
 */
export interface SinkRows {
  readonly sink: OutputSink;
  readonly row: number;
  readonly rows?: number;
}

/** Whether `entries` (sinks written) together take every one of an output's `total` rows. */
export function allRowsWritten(entries: readonly SinkRows[], total: number): boolean {
  if (total <= 0) return false;
  // A request may name one output twice (two regions): rows are merged as ranges, not counted.
  const ranges = entries
    .map(({ row, rows }) => [row, row + (rows ?? total - row)] as const)
    .sort((a, b) => a[0] - b[0]);
  let covered = 0;
  for (const [start, end] of ranges) {
    if (start > covered) return false;
    covered = Math.max(covered, end);
  }
  return covered >= total;
}

/** A source over bytes already in memory. */
export function tensorSource(t: Tensor): TensorSource {
  return {
    dtype: t.dtype,
    shape: t.shape,
    byteLength: t.data.byteLength,
    data: t.data,
    fill: (target) => target.set(t.data),
  };
}

/** Same bytes, another shape of the same element count (e.g. with a batch dimension added). */
export function reshapeSource(source: TensorSource, shape: number[]): TensorSource {
  return {
    dtype: source.dtype,
    shape,
    byteLength: source.byteLength,
    ...(source.bytes ? { bytes: true as const } : {}),
    ...(source.data ? { data: source.data } : {}),
    ...(source.file ? { file: source.file } : {}),
    ...(source.parts ? { parts: source.parts } : {}),
    fill: (target) => source.fill(target),
  };
}

/**
 * The tensor itself: the bytes already in memory, or read (decoded, loaded) into a buffer of its
 * own. A BYTES source becomes its serialised items (shape [items], not one byte per element):
 * what a workflow hands on to a model with processing as it came.
 */
export function readSource(source: TensorSource): Tensor {
  let data = source.data;
  if (!data) {
    data = Buffer.allocUnsafe(source.byteLength);
    source.fill(data);
  }
  return source.bytes
    ? { dtype: source.dtype, shape: source.shape, data }
    : makeTensor(source.dtype, source.shape, data);
}
