import { makeTensor, numberReader, type Tensor } from '../tensor/tensor.js';

/**
 * An embedding output's answer: the vectors stay behind a tensor:// handle (an agent passes them
 * on to a later call, or reads them as a resource, rather than carrying hundreds of numbers in
 * its context); the answer says what they are.
 */
export interface EmbeddingAnswer {
  /** The model output holding the vectors; its handle holds them (normalised when asked). */
  output: string;
  uri: string;
  items: number;
  dims: number;
  normalized: boolean;
  /** Each item's vector length before normalising: near 0 means the model saw nothing to embed. */
  norms: number[];
}

/** Each row's L2 norm, and with `normalize` the rows scaled to unit length (float32). */
export function embedRows(vectors: Tensor, normalize: boolean): { tensor: Tensor; norms: number[] } {
  const [items = 0, dims = 0] = vectors.shape;
  const read = numberReader(vectors);
  const norms: number[] = [];
  const out = normalize ? new Float32Array(items * dims) : undefined;
  for (let item = 0; item < items; item++) {
    let sum = 0;
    for (let d = 0; d < dims; d++) sum += read(item * dims + d) ** 2;
    const norm = Math.sqrt(sum);
    norms.push(norm);
    if (out) {
      // A zero vector stays zero rather than becoming NaN.
      const scale = norm > 0 ? 1 / norm : 0;
      for (let d = 0; d < dims; d++) out[item * dims + d] = read(item * dims + d) * scale;
    }
  }
  return {
    tensor: out ? makeTensor('float32', [items, dims], new Uint8Array(out.buffer)) : vectors,
    norms,
  };
}
