/**
 * One error type for the whole gateway. Every failure a caller can cause or see carries a stable
 * string code; the code is mapped once to an MCP `isError` result (mcp/), an HTTP status (http/)
 * and, later, an OIP v2 error body. docs/errors.md lists every code and a test keeps the two in step.
 */

export const ERROR_CODES = {
  MODEL_NOT_FOUND: { status: 404, summary: 'No model with that name is registered.' },
  VERSION_NOT_FOUND: { status: 404, summary: 'The model exists but not in that version.' },
  MODEL_NOT_READY: { status: 503, summary: 'The model is registered but still loading or failed to load.' },
  MISSING_INPUT: { status: 400, summary: 'A declared input tensor was not given.' },
  UNKNOWN_INPUT: { status: 400, summary: 'An input name is not declared by the model.' },
  BAD_TENSOR: {
    status: 400,
    summary: 'An input tensor value is malformed (not numeric, ragged, bad base64, bad file).',
  },
  DTYPE_MISMATCH: { status: 400, summary: "An input's dtype differs from the model's declared dtype." },
  SHAPE_MISMATCH: { status: 400, summary: "An input's rank or dimensions differ from the model's declared shape." },
  BYTE_LENGTH_MISMATCH: { status: 400, summary: 'Inline binary data does not hold numel x itemsize bytes.' },
  BAD_IMAGE: {
    status: 400,
    summary: 'An image input is empty, corrupt, truncated, not an image, or not in a form an image input takes.',
  },
  IMAGE_FORMAT_NOT_SUPPORTED: {
    status: 415,
    summary: "An image input is in a format (TIFF, HEIC, …) the model's processing does not take.",
  },
  IMAGE_TOO_LARGE: {
    status: 413,
    summary: "An image has more pixels than its input's max_pixels (a decompression bomb guard).",
  },
  BAD_TEXT: {
    status: 400,
    summary: 'A text input is not a string, or its bytes (an OIP v2 BYTES element) are not valid UTF-8.',
  },
  TEXT_TOO_LONG: {
    status: 413,
    summary: "A text has more tokens than its input's max_length, and its processing refuses rather than truncates.",
  },
  BAD_AUDIO: {
    status: 400,
    summary:
      'An audio input is empty, not a WAV file, holds no samples, or its header does not match its data (a truncated or lying header).',
  },
  AUDIO_FORMAT_NOT_SUPPORTED: {
    status: 415,
    summary: 'An audio input is MP3, FLAC, Ogg or a WAV encoding (A-law, ADPCM, …) the worker does not decode.',
  },
  AUDIO_TOO_LONG: { status: 413, summary: "A recording lasts longer than its input's max_seconds." },
  HANDLER_FAILED: {
    status: 422,
    summary:
      "The model's processing handler (its own Python code) raised on this request, or answered in a form the worker cannot send.",
  },
  INPUT_TOO_LARGE: { status: 413, summary: 'An input exceeds the configured size limit for its form.' },
  PATH_NOT_ALLOWED: { status: 403, summary: 'A tensor file path lies outside the configured allowed roots.' },
  FILE_NOT_FOUND: {
    status: 404,
    summary:
      'A file path does not exist or is not a regular file, or the file was removed or replaced before it could be read.',
  },
  HANDLE_NOT_FOUND: { status: 404, summary: 'A tensor:// handle is unknown or has expired.' },
  HANDLE_ELSEWHERE: {
    status: 409,
    summary:
      'A tensor:// handle was made by another replica, whose memory holds it; route the session to one replica or send the tensor itself.',
  },
  REQUEST_NOT_FOUND: {
    status: 404,
    summary: 'No recent request with that id: unknown, or older than the last 4096 of its model version.',
  },
  BAD_PARAMETER: { status: 400, summary: 'A request parameter is unknown or has a value the model does not offer.' },
  VARIANT_UNAVAILABLE: {
    status: 422,
    summary:
      'The model offers that precision (or engine), but its variant was rejected by its accuracy check or cannot run on this runtime or device; the message says why. Other precisions still serve.',
  },
  INVALID_REQUEST: {
    status: 400,
    summary: 'The request breaks its protocol: malformed JSON, a missing field, header lengths that do not add up.',
  },
  UNKNOWN_OUTPUT: { status: 400, summary: 'An output asked for is not declared by the model.' },
  SHARED_MEMORY_NOT_FOUND: {
    status: 404,
    summary: 'No shared-memory region of that name is registered, or its object cannot be opened.',
  },
  SHARED_MEMORY_OUT_OF_RANGE: {
    status: 400,
    summary:
      "An offset and size reach outside the shared-memory region, or a tensor does not fit the space given, or the region's object was cut shorter than registered before the request's input was read (only that request fails, not those batched with it).",
  },
  SHARED_MEMORY_IN_USE: { status: 409, summary: 'A shared-memory region of that name is already registered.' },
  INVALID_CONFIG: { status: 400, summary: 'A model config does not match the model repository schema.' },
  UNSUPPORTED_FORMAT: { status: 400, summary: 'The model format is not supported by the installed runtime.' },
  LOAD_FAILED: {
    status: 500,
    summary: 'The worker could not load or warm up the model, or could not run on the CPUs `resources.cpus` names.',
  },
  EXPORT_FAILED: {
    status: 422,
    summary:
      'The model could not be exported: torch.export or torch.onnx.export could not trace it (data-dependent control flow, an operator ONNX lacks), or AOTInductor could not compile it.',
  },
  EXPORT_MISMATCH: {
    status: 422,
    summary: "An exported model's answers differ from the original's on the same inputs by more than the tolerance.",
  },
  INFERENCE_FAILED: { status: 500, summary: 'The model raised an error during the forward pass.' },
  WORKER_CRASHED: { status: 503, summary: 'The worker process serving the model exited; it is restarted.' },
  REMOTE_UNAVAILABLE: {
    status: 503,
    summary:
      'The remote OIP v2 endpoint of a remote model could not be reached, timed out or answered 502/503/504, after retries.',
  },
  REMOTE_ERROR: {
    status: 502,
    summary:
      'The remote OIP v2 endpoint of a remote model refused the call or answered something that is not a valid response.',
  },
  REMOTE_MISMATCH: {
    status: 409,
    summary:
      "A remote model's metadata disagrees with the local config: a tensor is missing or has another datatype or shape.",
  },
  TIMEOUT: { status: 504, summary: 'The request did not finish within its timeout.' },
  CANCELLED: { status: 499, summary: 'The caller cancelled the request (or went away) before it finished.' },
  MEMORY_BUDGET_EXCEEDED: {
    status: 507,
    summary: 'Loading the model would exceed the memory budget and no idle model can be unloaded.',
  },
  QUEUE_FULL: { status: 429, summary: 'Too many requests are waiting for this model; retry after a short wait.' },
  RATE_LIMITED: {
    status: 429,
    summary:
      'The caller (API key, JWT subject or address) sent more requests than its rate limit; retry after Retry-After.',
  },
  TOO_MANY_CONNECTIONS: {
    status: 503,
    summary: 'The server holds as many client connections as --max-connections allows; retry, or reuse a connection.',
  },
  SHUTTING_DOWN: {
    status: 503,
    summary:
      'The server is stopping and takes no new requests, or the model version was unloaded (`unload_model`, an eviction, the server stopping) before it answered or while it loaded.',
  },
  RUN_NOT_FOUND: { status: 404, summary: 'No training run with that id is in the runs directory.' },
  UNKNOWN_HYPERPARAMETER: { status: 400, summary: 'The run did not declare a hyperparameter of that name.' },
  INVALID_HYPERPARAMETER: {
    status: 400,
    summary: "A hyperparameter value has the wrong type, is not finite, or lies outside the run's declared range.",
  },
  RUN_EXITED: { status: 409, summary: 'The run has stopped, finished or its process is gone; it takes no commands.' },
  RUN_FILE_CORRUPT: { status: 422, summary: 'A run file is truncated or not a tensorgate run file.' },
  RUN_CONTROLLED_ELSEWHERE: {
    status: 409,
    summary: 'Another tensorgate server on this runs directory controls the runs; this one only observes.',
  },
  UNAUTHENTICATED: {
    status: 401,
    summary:
      'The HTTP request carries no bearer credential, or one that is unknown, revoked, expired or for another audience.',
  },
  AUTH_NOT_CONFIGURED: {
    status: 500,
    summary:
      'Authentication is required (a non-loopback address, or --auth on) and no API key or JWT issuer is configured.',
  },
  KEY_NOT_FOUND: { status: 404, summary: 'No API key with that id.' },
  FORBIDDEN: {
    status: 403,
    summary: "The caller's roles do not allow this on that object (whether or not it exists).",
  },
  WORKFLOW_NOT_FOUND: { status: 404, summary: 'No workflow with that name is registered.' },
  INVALID_WORKFLOW: {
    status: 400,
    summary:
      'A workflow definition is malformed, cyclic, or names a model, tensor, stage or condition that does not fit.',
  },
  WORKFLOW_CONDITION_FAILED: {
    status: 422,
    summary: "A workflow branch condition could not be decided on this request's tensors.",
  },
  REGISTRY_UNAVAILABLE: {
    status: 503,
    summary:
      'The shared (PostgreSQL) registry cannot be reached; loaded models keep serving, registrations wait for it to come back.',
  },
  REGISTRATION_CONFLICT: {
    status: 409,
    summary:
      'The model or workflow is being registered by another request, or was registered again elsewhere while this registration ran.',
  },
  JOB_NOT_FOUND: { status: 404, summary: 'No batch job with that id is recorded.' },
  RESULTS_EXIST: {
    status: 409,
    summary: "The job's results file exists already; a job never writes over one unless asked to.",
  },
  DISK_FULL: {
    status: 507,
    summary: "The disk holding the job's results file is full (or the file reached its size limit); the job is paused.",
  },
  JOB_NOT_PAUSED: { status: 409, summary: 'Only a paused job can be resumed; this one is not paused.' },
  INTERNAL: { status: 500, summary: 'An unexpected error inside tensorgate; please report it.' },
} as const satisfies Record<string, { status: number; summary: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

export class TensorgateError extends Error {
  override readonly name = 'TensorgateError';

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly data: Record<string, unknown> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  get status(): number {
    return ERROR_CODES[this.code].status;
  }

  toJSON(): { code: ErrorCode; message: string; data: Record<string, unknown> } {
    return { code: this.code, message: this.message, data: this.data };
  }
}

/** Builds an error with a code; the message must tell the caller how to fix the call. */
export function tgError(
  code: ErrorCode,
  message: string,
  data: Record<string, unknown> = {},
  cause?: unknown,
): TensorgateError {
  return new TensorgateError(code, message, data, cause === undefined ? undefined : { cause });
}

/** Normalises anything thrown into a TensorgateError, so every adapter maps one type. */
export function asTensorgateError(err: unknown): TensorgateError {
  if (err instanceof TensorgateError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new TensorgateError('INTERNAL', message, {}, { cause: err });
}

export function isErrorCode(value: string): value is ErrorCode {
  return Object.hasOwn(ERROR_CODES, value);
}
