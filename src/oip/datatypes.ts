import type { DType } from '../tensor/dtype.js';

/**
 * Open Inference Protocol v2 datatype names and tensorgate dtypes. OIP names that no model here
 * can take (UINT16/32/64) are known but unsupported, so their error can say so. BYTES is no dtype:
 * both encodings carry it to models with processing (infer-codec.ts, grpc.ts) before asking here.
 */

const TO_DTYPE = {
  BOOL: 'bool',
  UINT8: 'uint8',
  INT8: 'int8',
  INT16: 'int16',
  INT32: 'int32',
  INT64: 'int64',
  FP16: 'float16',
  BF16: 'bfloat16',
  FP32: 'float32',
  FP64: 'float64',
} as const satisfies Record<string, DType>;

export type OipDatatype = keyof typeof TO_DTYPE;

const UNSUPPORTED = new Set(['UINT16', 'UINT32', 'UINT64']);

const FROM_DTYPE = Object.fromEntries(Object.entries(TO_DTYPE).map(([oip, dtype]) => [dtype, oip])) as Record<
  DType,
  OipDatatype
>;

export function oipDatatype(dtype: DType): OipDatatype {
  return FROM_DTYPE[dtype];
}

/** The dtype of an OIP datatype name; a reason string when there is none. */
export function dtypeOf(datatype: unknown): DType | { reason: string } {
  if (typeof datatype === 'string' && Object.hasOwn(TO_DTYPE, datatype)) return TO_DTYPE[datatype as OipDatatype];
  if (typeof datatype === 'string' && UNSUPPORTED.has(datatype))
    return { reason: `datatype ${datatype} is valid OIP v2 but no model served here takes it` };
  return {
    reason: `datatype ${JSON.stringify(datatype)} is not an OIP v2 datatype; use one of ${Object.keys(TO_DTYPE).join(', ')}`,
  };
}
