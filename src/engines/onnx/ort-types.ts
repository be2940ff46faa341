import type { Tensor } from '../../tensor/tensor.js';

/** ONNX Runtime's element type names for tensorgate's dtypes (it has no bfloat16). */
export const ORT_TYPES: Partial<Record<Tensor['dtype'], string>> = {
  float32: 'float32',
  float64: 'float64',
  float16: 'float16',
  int8: 'int8',
  uint8: 'uint8',
  int16: 'int16',
  int32: 'int32',
  int64: 'int64',
  bool: 'bool',
};
