import { z } from 'zod';
import type { TensorSpec } from './model-config.js';

/**
 * A model's `processing` section: what an agent passes instead of tensors (image files for now),
 * how the worker turns it into the model's input tensors, and how the model's outputs are turned
 * into an answer (top-k labels). docs/processing.md is the prose form of this schema; the worker's
 * side is python/tensorgate/_processing.py.
 */

export const IMAGE_FORMATS = ['png', 'jpeg', 'webp', 'gif', 'bmp'] as const;
export type ImageFormat = (typeof IMAGE_FORMATS)[number];
const INTERPOLATIONS = ['nearest', 'bilinear', 'bicubic', 'box', 'lanczos'] as const;

const size = z.tuple([z.number().int().min(1), z.number().int().min(1)]);

export const ImageInputSchema = z
  .object({
    type: z.literal('image'),
    /** The model input it becomes; the processed input's own name when absent. */
    tensor: z.string().optional(),
    description: z.string().optional(),
    /** RGB (3 channels) or L (grayscale, 1 channel); transparency is flattened onto white. */
    mode: z.enum(['RGB', 'L']).default('RGB'),
    formats: z
      .array(z.enum(IMAGE_FORMATS))
      .min(1)
      .default([...IMAGE_FORMATS]),
    /** Images with more pixels are refused (IMAGE_TOO_LARGE) before they are decoded. */
    max_pixels: z.number().int().min(1).default(50_000_000),
    /** Dark ink on light paper to light on dark (MNIST-style models), before resizing. */
    invert: z.boolean().default(false),
    resize: z
      .object({
        /** The shorter side becomes this, keeping the aspect ratio (torchvision's Resize(int)). */
        shorter: z.number().int().min(1).optional(),
        /** Exactly [height, width]. */
        size: size.optional(),
        interpolation: z.enum(INTERPOLATIONS).default('bilinear'),
      })
      .strict()
      .refine((r) => (r.shorter === undefined) !== (r.size === undefined), {
        message: 'resize takes one of "shorter" (a side in pixels) or "size" ([height, width])',
      })
      .optional(),
    /** [height, width] from the middle, after resizing; smaller images are padded with black. */
    center_crop: size.optional(),
    /** Pixels (0-255) are multiplied by this before mean and std. */
    scale: z
      .number()
      .positive()
      .default(1 / 255),
    mean: z.array(z.number()).min(1).max(3).optional(),
    std: z.array(z.number().positive()).min(1).max(3).optional(),
    layout: z.enum(['CHW', 'HWC']).default('CHW'),
  })
  .strict();
export type ImageInputConfig = z.infer<typeof ImageInputSchema>;

export const ClassificationOutputSchema = z
  .object({
    type: z.literal('classification'),
    /** The model output holding one score per class; the only output when absent. */
    tensor: z.string().optional(),
    /** softmax: one class per item; sigmoid: independent labels (multi-label); none: scores as they are. */
    activation: z.enum(['softmax', 'sigmoid', 'none']).default('softmax'),
    top_k: z.number().int().min(1).max(100).default(5),
    /** Labels scoring below this are left out (multi-label answers); none by default. */
    threshold: z.number().min(0).max(1).optional(),
  })
  .strict();
export type ClassificationOutputConfig = z.infer<typeof ClassificationOutputSchema>;

/** The model's own MCP tool (docs/processing.md#the-models-tool). */
export const ModelToolSchema = z
  .object({
    /** The tool's name; the model's name when absent (with "_model" added if a built-in tool has it). */
    name: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,64}$/, 'tool names are 1-64 letters, digits, "_", "-" or "."')
      .optional(),
    title: z.string().optional(),
    /** What the agent reads to decide to call it; made from the model's description and inputs when absent. */
    description: z.string().optional(),
  })
  .strict();
export type ModelToolConfig = z.infer<typeof ModelToolSchema>;

export const ProcessingSchema = z
  .object({
    tool: ModelToolSchema.default({}),
    inputs: z.record(
      z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'processed input names are identifiers such as "image"'),
      ImageInputSchema,
    ),
    output: ClassificationOutputSchema.optional(),
  })
  .strict();
export type ProcessingConfig = z.infer<typeof ProcessingSchema>;

type Issue = { path: (string | number)[]; message: string };

/**
 * The checks that need the rest of the config: every processed input makes one declared model
 * input of a dtype and shape its steps can produce, and every model input is made by one.
 */
export function processingIssues(
  processing: ProcessingConfig,
  inputs: TensorSpec[],
  outputs: TensorSpec[],
  engine: string,
): Issue[] {
  const issues: Issue[] = [];
  const at = (...path: (string | number)[]) => ['processing', ...path];
  if (engine !== 'torch')
    issues.push({ path: at(), message: `processing runs in the torch worker; engine "${engine}" has none` });
  const made = new Map<string, string>();
  for (const [name, image] of Object.entries(processing.inputs)) {
    const tensor = image.tensor ?? name;
    const spec = inputs.find((s) => s.name === tensor);
    if (!spec) {
      issues.push({
        path: at('inputs', name, 'tensor'),
        message: `no model input "${tensor}"; the model takes ${inputs.map((s) => `"${s.name}"`).join(', ')}`,
      });
      continue;
    }
    const other = made.get(tensor);
    if (other !== undefined)
      issues.push({
        path: at('inputs', name, 'tensor'),
        message: `model input "${tensor}" is already made by "${other}"`,
      });
    made.set(tensor, name);
    issues.push(...imageIssues(name, image, spec));
  }
  for (const spec of inputs)
    if (!made.has(spec.name))
      issues.push({
        path: at('inputs'),
        message: `model input "${spec.name}" is made by no processed input; with processing every model input is`,
      });
  const output = processing.output;
  if (output) {
    const named = output.tensor ?? (outputs.length === 1 ? outputs[0]?.name : undefined);
    const spec = outputs.find((s) => s.name === named);
    if (!spec)
      issues.push({
        path: at('output', 'tensor'),
        message:
          output.tensor === undefined
            ? 'the model has several outputs: name the one holding the class scores in "tensor"'
            : `no model output "${output.tensor}"`,
      });
    else if (spec.shape.length !== 2)
      issues.push({
        path: at('output', 'tensor'),
        message: `classification reads [batch, classes] scores; "${spec.name}" has shape [${spec.shape.join(', ')}]`,
      });
  }
  return issues;
}

function imageIssues(name: string, image: ImageInputConfig, spec: TensorSpec): Issue[] {
  const issues: Issue[] = [];
  const at = (...path: (string | number)[]) => ['processing', 'inputs', name, ...path];
  const channels = image.mode === 'L' ? 1 : 3;
  for (const key of ['mean', 'std'] as const) {
    const values = image[key];
    if (values && values.length !== 1 && values.length !== channels)
      issues.push({
        path: at(key),
        message: `${key} has ${values.length} values for ${channels} channel(s) (${image.mode})`,
      });
  }
  if (spec.dtype === 'uint8' && (image.mean || image.std || image.scale !== 1 / 255))
    issues.push({
      path: at(),
      message: `model input "${spec.name}" is uint8: pixels go as they are, without scale, mean or std`,
    });
  else if (!['uint8', 'float32', 'float16', 'bfloat16', 'float64'].includes(spec.dtype))
    issues.push({ path: at(), message: `images become uint8 or floating-point tensors, not ${spec.dtype}` });
  const [h, w] = image.center_crop ?? image.resize?.size ?? [-1, -1];
  const expected = image.layout === 'CHW' ? [-1, channels, h, w] : [-1, h, w, channels];
  const fits =
    spec.shape.length === 4 &&
    spec.shape[0] === -1 &&
    expected.every((d, i) => d === -1 || spec.shape[i] === -1 || spec.shape[i] === d);
  if (!fits)
    issues.push({
      path: at(),
      message: `the images become [batch, ${expected
        .slice(1)
        .map((d) => (d === -1 ? '?' : d))
        .join(
          ', ',
        )}] (${image.layout}, ${image.mode}) but model input "${spec.name}" is [${spec.shape.join(', ')}]; set mode, layout, resize.size or center_crop to match`,
    });
  else if (h === -1 && (spec.shape[image.layout === 'CHW' ? 2 : 1] ?? -1) !== -1)
    issues.push({
      path: at(),
      message: `model input "${spec.name}" has a fixed size: set resize.size or center_crop so every image fits it`,
    });
  return issues;
}

/** Model input names that processing makes, by the processed input making each. */
export function processedTensor(name: string, image: ImageInputConfig): string {
  return image.tensor ?? name;
}
