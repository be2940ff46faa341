import { z } from 'zod';

/**
 * The standard inference request shared by every adapter (MCP today; OIP v2 and the CLI map onto
 * it): request id, model and version, named input tensors in any supported form, and parameters.
 *
 * Input values and parameters are deliberately loose in the schema: decode-inputs.ts validates
 * them against the model's declared specs so that a bad value gets an error that names the input,
 * says what was expected and how to fix the call, instead of a generic schema failure.
 */

export const TENSOR_INPUT_FORMS = [
  'Each input is one of:',
  '(1) a small nested array of numbers, e.g. [[5.1, 3.5, 1.4, 0.2]];',
  '(2) {"b64": "...", "shape": [1, 3, 224, 224], "dtype": "float32"}: raw little-endian row-major bytes in base64 (dtype defaults to the declared one);',
  '(3) {"path": "/abs/file.npy"} or a .safetensors file (add "key" to pick a tensor) under an allowed root;',
  '(4) {"handle": "tensor://ID"} or the bare string "tensor://ID": an output of an earlier call.',
  'A missing leading batch dimension is added when the model declares it dynamic (-1).',
].join(' ');

export const InferenceRequestSchema = z.object({
  model: z.string().describe('model name, from list_models'),
  version: z.string().optional().describe('model version; the default version when omitted'),
  inputs: z.record(z.string(), z.unknown()).describe(`Input tensors by declared name. ${TENSOR_INPUT_FORMS}`),
  parameters: z
    .record(z.string(), z.unknown())
    .optional()
    .describe(
      'optional: {"precision": "fp32" | "bf16" | "fp16" | "int8"} (as offered by the model; describe_model lists them), {"engine": "torch" | "onnx"} to run on one engine rather than the one chosen, {"top_k": N}, {"timeout_ms": N}',
    ),
  request_id: z.string().max(128).optional().describe('echoed back in the result; generated when absent'),
});
export type InferenceRequest = z.infer<typeof InferenceRequestSchema>;
