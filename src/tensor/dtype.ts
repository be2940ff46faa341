/**
 * The element types tensorgate moves around, with their sizes and their names in the two file
 * formats it reads and writes (numpy `.npy` descr strings and safetensors dtype tags).
 */

export const DTYPES = [
  'float32',
  'float64',
  'float16',
  'bfloat16',
  'int8',
  'uint8',
  'int16',
  'int32',
  'int64',
  'bool',
] as const;

export type DType = (typeof DTYPES)[number];

const SIZES: Record<DType, number> = {
  float32: 4,
  float64: 8,
  float16: 2,
  bfloat16: 2,
  int8: 1,
  uint8: 1,
  int16: 2,
  int32: 4,
  int64: 8,
  bool: 1,
};

/** numpy descr for each dtype; numpy has no bfloat16, so it has none. */
const NPY_DESCRS: Record<DType, string | undefined> = {
  float32: '<f4',
  float64: '<f8',
  float16: '<f2',
  bfloat16: undefined,
  int8: '|i1',
  uint8: '|u1',
  int16: '<i2',
  int32: '<i4',
  int64: '<i8',
  bool: '|b1',
};

const SAFETENSORS_DTYPES: Record<DType, string> = {
  float32: 'F32',
  float64: 'F64',
  float16: 'F16',
  bfloat16: 'BF16',
  int8: 'I8',
  uint8: 'U8',
  int16: 'I16',
  int32: 'I32',
  int64: 'I64',
  bool: 'BOOL',
};

const FROM_NPY = new Map<string, DType>();
for (const dtype of DTYPES) {
  const descr = NPY_DESCRS[dtype];
  if (descr === undefined) continue;
  FROM_NPY.set(descr, dtype);
  // One-byte types have no byte order; numpy writes '|' but '<' and '=' mean the same thing.
  if (descr.startsWith('|')) {
    FROM_NPY.set(`<${descr.slice(1)}`, dtype);
    FROM_NPY.set(`=${descr.slice(1)}`, dtype);
  }
}

const FROM_SAFETENSORS = new Map<string, DType>(DTYPES.map((d) => [SAFETENSORS_DTYPES[d], d]));

export function isDType(value: unknown): value is DType {
  return typeof value === 'string' && Object.hasOwn(SIZES, value);
}

/** Bytes per element. */
export function dtypeSize(dtype: DType): number {
  return SIZES[dtype];
}

export function isFloatDType(dtype: DType): boolean {
  return dtype === 'float32' || dtype === 'float64' || dtype === 'float16' || dtype === 'bfloat16';
}

/** The numpy descr (e.g. `'<f4'`), or undefined for bfloat16, which numpy lacks. */
export function npyDescr(dtype: DType): string | undefined {
  return NPY_DESCRS[dtype];
}

/** The dtype for a little-endian numpy descr, or undefined when tensorgate does not support it. */
export function dtypeFromNpyDescr(descr: string): DType | undefined {
  return FROM_NPY.get(descr);
}

/** The safetensors dtype tag (e.g. `'F32'`). */
export function safetensorsDType(dtype: DType): string {
  return SAFETENSORS_DTYPES[dtype];
}

export function dtypeFromSafetensors(tag: string): DType | undefined {
  return FROM_SAFETENSORS.get(tag);
}
