import { z } from 'zod';
import type { TensorSpec } from './model-config.js';

/**
 * A model's `processing` section: what an agent passes instead of tensors (image files, text,
 * WAV recordings), how the worker turns it into the model's input tensors, and how the model's
 * outputs are turned into an answer (top-k labels). docs/processing.md is the prose form of this schema; the worker's
 * side is python/tensorgate/_processing.py.
 */

export const IMAGE_FORMATS = ['png', 'jpeg', 'webp', 'gif', 'bmp'] as const;
export type ImageFormat = (typeof IMAGE_FORMATS)[number];
const INTERPOLATIONS = ['nearest', 'bilinear', 'bicubic', 'box', 'lanczos'] as const;

const FLOATING = ['float32', 'float16', 'bfloat16', 'float64'];

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
    /**
     * With a resize, large JPEGs are decoded at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling)
     * while still at least the resize's size: 12x faster for a phone photo, with pixels a little
     * different from a full decode. false: decode in full, exactly as torchvision does.
     */
    jpeg_draft: z.boolean().default(true),
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

/** Text tokenized by a Hugging Face `tokenizer.json` into the model's token ids and mask. */
export const TextInputSchema = z
  .object({
    type: z.literal('text'),
    description: z.string().optional(),
    /** The tokenizer's file, relative to the version folder (Hugging Face `tokenizers` format). */
    tokenizer: z
      .string()
      .refine((f) => !f.startsWith('/') && !f.split(/[\\/]/).includes('..'), {
        message: 'the tokenizer is a file in the version folder, such as "tokenizer.json"',
      })
      .default('tokenizer.json'),
    /** Tokens per text, special tokens included. */
    max_length: z.number().int().min(1).max(65_536).default(512),
    /** Texts longer than max_length are cut to it (truncate) or refused with TEXT_TOO_LONG (refuse). */
    truncation: z.enum(['truncate', 'refuse']).default('truncate'),
    /** Pad each batch to its longest text, or every text to max_length (for fixed-shape models). */
    padding: z.enum(['longest', 'max_length']).default('longest'),
    /**
     * Which model inputs take the token ids, the attention mask and the token type ids. Absent:
     * "input_ids", and "attention_mask" and "token_type_ids" where the model has inputs so named.
     */
    tensors: z
      .object({
        input_ids: z.string().default('input_ids'),
        attention_mask: z.string().optional(),
        token_type_ids: z.string().optional(),
      })
      .strict()
      .optional(),
  })
  .strict();
export type TextInputConfig = z.infer<typeof TextInputSchema>;

/** A WAV recording, mixed to mono, resampled and padded or trimmed to the model's length. */
export const AudioInputSchema = z
  .object({
    type: z.literal('audio'),
    /** The model input it becomes; the processed input's own name when absent. */
    tensor: z.string().optional(),
    description: z.string().optional(),
    /** Samples per second the model takes; recordings at other rates are resampled to it. */
    sample_rate: z.number().int().min(1000).max(768_000),
    /** Samples per item: longer recordings are trimmed, shorter ones padded with silence. Absent: each batch is padded to its longest. */
    length: z.number().int().min(1).optional(),
    /** Recordings longer than this are refused (AUDIO_TOO_LONG) before they are resampled. */
    max_seconds: z.number().positive().default(600),
  })
  .strict();
export type AudioInputConfig = z.infer<typeof AudioInputSchema>;

export const ProcessedInputSchema = z.discriminatedUnion('type', [ImageInputSchema, TextInputSchema, AudioInputSchema]);
export type ProcessedInputConfig = z.infer<typeof ProcessedInputSchema>;

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

/** One vector per item (a sentence, an image): kept behind a tensor:// handle, summarised. */
export const EmbeddingOutputSchema = z
  .object({
    type: z.literal('embedding'),
    /** The model output holding one vector per item; the only output when absent. */
    tensor: z.string().optional(),
    /** Scale each vector to unit length (L2), so that cosine similarity is a dot product. */
    normalize: z.boolean().default(false),
  })
  .strict();
export type EmbeddingOutputConfig = z.infer<typeof EmbeddingOutputSchema>;

/** One picture per item (a restored photo, a depth map), answered as PNG image content. */
export const ImageOutputSchema = z
  .object({
    type: z.literal('image'),
    /** The model output holding the pictures; the only output when absent. */
    tensor: z.string().optional(),
    /** [batch, channels, height, width] (CHW) or [batch, height, width, channels] (HWC); 1, 3 or 4 channels. */
    layout: z.enum(['CHW', 'HWC']).default('CHW'),
    /** Values are multiplied by this, rounded and clamped to 0-255: 255 for outputs in [0, 1], 1 for 0-255. */
    scale: z.number().positive().default(255),
  })
  .strict();
export type ImageOutputConfig = z.infer<typeof ImageOutputSchema>;

/** A class per pixel (segmentation), answered as a PNG in a colour per class and each class's share. */
export const MaskOutputSchema = z
  .object({
    type: z.literal('mask'),
    /** [batch, height, width] class ids, or [batch, classes, height, width] scores (the best class per pixel). */
    tensor: z.string().optional(),
  })
  .strict();
export type MaskOutputConfig = z.infer<typeof MaskOutputSchema>;

/** Token ids per item (a generator, a translator), decoded to text by the model's tokenizer. */
export const TextOutputSchema = z
  .object({
    type: z.literal('text'),
    /** The model output holding [batch, tokens] ids; the only output when absent. */
    tensor: z.string().optional(),
    /** The tokenizer's file, relative to the version folder. */
    tokenizer: z
      .string()
      .refine((f) => !f.startsWith('/') && !f.split(/[\\/]/).includes('..'), {
        message: 'the tokenizer is a file in the version folder, such as "tokenizer.json"',
      })
      .default('tokenizer.json'),
    /** Leave out [CLS], [SEP], padding and the other special tokens. */
    skip_special_tokens: z.boolean().default(true),
  })
  .strict();
export type TextOutputConfig = z.infer<typeof TextOutputSchema>;

/**
 * Objects found in an image: boxes, a score and a class each, kept above a threshold, with
 * overlapping boxes of a class suppressed (NMS), mapped back to the pixels of the image as sent.
 */
export const DetectionOutputSchema = z
  .object({
    type: z.literal('detection'),
    /** The model output holding [batch, boxes, 4] coordinates in the model input's pixels. */
    boxes: z.string().default('boxes'),
    /** [batch, boxes] scores (with `labels`), or [batch, boxes, classes] scores per class. */
    scores: z.string().default('scores'),
    /** The model output holding [batch, boxes] class ids, when `scores` has one score per box. */
    labels: z.string().optional(),
    /** x1 y1 x2 y2 (corners), x y w h (top-left corner and size), or cx cy w h (centre and size). */
    box_format: z.enum(['xyxy', 'xywh', 'cxcywh']).default('xyxy'),
    /** Coordinates as fractions (0-1) of the model input's width and height, not pixels. */
    normalized: z.boolean().default(false),
    /** Applied to the scores first: softmax over classes (DETR), sigmoid (YOLO, RetinaNet), or none. */
    activation: z.enum(['softmax', 'sigmoid', 'none']).default('none'),
    /** A class that means "no object" (DETR's last one), never answered. */
    background: z.number().int().min(0).optional(),
    /** Boxes scoring below this are left out. */
    threshold: z.number().min(0).max(1).default(0.5),
    /** Of two boxes of a class overlapping by more than this (intersection over union), the lower-scoring one is left out; 1 keeps every box. */
    iou_threshold: z.number().min(0).max(1).default(0.5),
    /** Suppress overlapping boxes whatever their classes, not only within a class. */
    class_agnostic: z.boolean().default(false),
    max_detections: z.number().int().min(1).max(1000).default(100),
    /** The processed image input the boxes are in; the only image input when absent. */
    image: z.string().optional(),
  })
  .strict();
export type DetectionOutputConfig = z.infer<typeof DetectionOutputSchema>;

export const ProcessedOutputSchema = z.discriminatedUnion('type', [
  ClassificationOutputSchema,
  DetectionOutputSchema,
  EmbeddingOutputSchema,
  ImageOutputSchema,
  MaskOutputSchema,
  TextOutputSchema,
]);
export type ProcessedOutputConfig = z.infer<typeof ProcessedOutputSchema>;

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
      ProcessedInputSchema,
    ),
    output: ProcessedOutputSchema.optional(),
    /**
     * The model's own processing code, "module:Class" (module.py in the version folder), run in
     * its worker: preprocess(items) makes the model inputs of the processed inputs' items, and
     * postprocess(outputs, items), if it has one, the answer per item.
     */
    handler: z
      .string()
      .regex(/^[A-Za-z_]\w*:[A-Za-z_]\w*$/, 'a handler is "module:Class", the module a .py file in the version folder')
      .optional(),
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
  // A handler makes the model's inputs itself: what the processed inputs declare is only what an
  // agent passes and how the gateway reads it.
  if (processing.handler) return [...issues, ...outputIssues(processing, outputs)];
  const made = new Map<string, string>();
  for (const [name, input] of Object.entries(processing.inputs)) {
    const specs: TensorSpec[] = [];
    for (const [role, tensor] of processedTensors(name, input, inputs)) {
      const spec = inputs.find((s) => s.name === tensor);
      const field = input.type === 'text' ? ['tensors', role] : ['tensor'];
      if (!spec) {
        issues.push({
          path: at('inputs', name, ...field),
          message: `no model input "${tensor}"; the model takes ${inputs.map((s) => `"${s.name}"`).join(', ')}`,
        });
        continue;
      }
      const other = made.get(tensor);
      if (other !== undefined)
        issues.push({
          path: at('inputs', name, ...field),
          message: `model input "${tensor}" is already made by "${other}"`,
        });
      made.set(tensor, name);
      specs.push(spec);
    }
    if (input.type === 'image' && specs[0]) issues.push(...imageIssues(name, input, specs[0]));
    if (input.type === 'text') issues.push(...textIssues(name, input, specs));
    if (input.type === 'audio' && specs[0]) issues.push(...audioIssues(name, input, specs[0]));
  }
  for (const spec of inputs)
    if (!made.has(spec.name))
      issues.push({
        path: at('inputs'),
        message: `model input "${spec.name}" is made by no processed input; with processing every model input is`,
      });
  issues.push(...outputIssues(processing, outputs));
  return issues;
}

function outputIssues(processing: ProcessingConfig, outputs: TensorSpec[]): Issue[] {
  const output = processing.output;
  if (!output) return [];
  if (output.type === 'detection') return detectionIssues(processing, output, outputs);
  const at = ['processing', 'output', 'tensor'];
  const named = output.tensor ?? (outputs.length === 1 ? outputs[0]?.name : undefined);
  const spec = outputs.find((s) => s.name === named);
  if (!spec)
    return [
      {
        path: at,
        message:
          output.tensor === undefined
            ? `the model has several outputs: name the one the ${output.type} answer is made of in "tensor"`
            : `no model output "${output.tensor}"`,
      },
    ];
  const shape = `"${spec.name}" has shape [${spec.shape.join(', ')}]`;
  const floating = FLOATING.includes(spec.dtype);
  const issue = (message: string): Issue[] => [{ path: at, message }];
  switch (output.type) {
    case 'classification':
      return spec.shape.length === 2 ? [] : issue(`classification reads [batch, classes] scores; ${shape}`);
    case 'embedding':
      if (spec.shape.length !== 2) return issue(`an embedding is [batch, dims]; ${shape}`);
      return floating ? [] : issue(`an embedding is a floating-point output; "${spec.name}" is ${spec.dtype}`);
    case 'image': {
      const channels = spec.shape[output.layout === 'CHW' ? 1 : 3] ?? 0;
      return spec.shape.length === 4 && [1, 3, 4].includes(channels)
        ? []
        : issue(`an image output has 1, 3 or 4 channels, laid out ${output.layout}; ${shape}`);
    }
    case 'text':
      return spec.shape.length === 2 && ['int64', 'int32'].includes(spec.dtype)
        ? []
        : issue(`a text output is [batch, tokens] int64 or int32 token ids; ${shape} (${spec.dtype})`);
    case 'mask':
      return (spec.shape.length === 3 && !floating) || (spec.shape.length === 4 && floating)
        ? []
        : issue(
            `a mask is [batch, height, width] integer class ids or [batch, classes, height, width] scores; ${shape} (${spec.dtype})`,
          );
  }
}

function detectionIssues(processing: ProcessingConfig, output: DetectionOutputConfig, outputs: TensorSpec[]): Issue[] {
  const at = (...path: string[]) => ['processing', 'output', ...path];
  const issues: Issue[] = [];
  const images = Object.entries(processing.inputs).filter(([, input]) => input.type === 'image');
  if (processing.handler)
    issues.push({
      path: at(),
      message: 'a detection output maps boxes back through the image steps, which a handler replaces',
    });
  if (output.image !== undefined ? !images.some(([name]) => name === output.image) : images.length !== 1)
    issues.push({
      path: at('image'),
      message:
        output.image !== undefined
          ? `no image input "${output.image}"; the image inputs are ${images.map(([n]) => `"${n}"`).join(', ') || 'none'}`
          : `the boxes are in an image input's pixels: ${images.length === 0 ? 'declare one' : 'name the one in "image"'}`,
    });
  const find = (field: 'boxes' | 'scores' | 'labels'): TensorSpec | undefined => {
    const name = output[field];
    const spec = outputs.find((s) => s.name === name);
    if (!spec)
      issues.push({
        path: at(field),
        message: `no model output "${name}"; the model answers ${outputs.map((s) => `"${s.name}"`).join(', ')}`,
      });
    return spec;
  };
  const describe = (spec: TensorSpec) => `"${spec.name}" is [${spec.shape.join(', ')}] ${spec.dtype}`;
  const boxes = find('boxes');
  if (boxes && (boxes.shape.length !== 3 || ![4, -1].includes(boxes.shape[2] ?? 0) || !FLOATING.includes(boxes.dtype)))
    issues.push({ path: at('boxes'), message: `boxes are [batch, boxes, 4] floating-point; ${describe(boxes)}` });
  const scores = find('scores');
  if (scores && (![2, 3].includes(scores.shape.length) || !FLOATING.includes(scores.dtype)))
    issues.push({
      path: at('scores'),
      message: `scores are [batch, boxes] or [batch, boxes, classes] floating-point; ${describe(scores)}`,
    });
  const perClass = scores?.shape.length === 3;
  if (scores && !perClass && output.labels === undefined)
    issues.push({
      path: at('labels'),
      message: `"${scores.name}" has one score per box: name the output holding each box's class id in "labels"`,
    });
  if (perClass && output.labels !== undefined)
    issues.push({
      path: at('labels'),
      message: `"${scores?.name}" has a score per class, which gives each box its class: leave "labels" out`,
    });
  if (scores && !perClass && output.activation === 'softmax')
    issues.push({ path: at('activation'), message: 'softmax needs a score per class ([batch, boxes, classes])' });
  if (output.labels !== undefined && !perClass) {
    const ids = find('labels');
    if (ids && (ids.shape.length !== 2 || FLOATING.includes(ids.dtype) || ids.dtype === 'bool'))
      issues.push({ path: at('labels'), message: `class ids are [batch, boxes] integers; ${describe(ids)}` });
  }
  const classes = perClass ? (scores?.shape[2] ?? -1) : -1;
  if (output.background !== undefined && classes !== -1 && output.background >= classes)
    issues.push({
      path: at('background'),
      message: `class ${output.background} is past the ${classes} classes of "${scores?.name}"`,
    });
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
  else if (!['uint8', ...FLOATING].includes(spec.dtype))
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

function textIssues(name: string, text: TextInputConfig, specs: TensorSpec[]): Issue[] {
  const issues: Issue[] = [];
  for (const spec of specs) {
    if (!['int64', 'int32'].includes(spec.dtype))
      issues.push({
        path: ['processing', 'inputs', name, 'tensors'],
        message: `token ids and masks are int64 or int32 tensors; model input "${spec.name}" is ${spec.dtype}`,
      });
    const length = spec.shape[1];
    if (spec.shape.length !== 2 || spec.shape[0] !== -1)
      issues.push({
        path: ['processing', 'inputs', name, 'tensors'],
        message: `texts become [batch, tokens] tensors; model input "${spec.name}" is [${spec.shape.join(', ')}]`,
      });
    else if (length !== -1 && (text.padding !== 'max_length' || text.max_length !== length))
      issues.push({
        path: ['processing', 'inputs', name],
        message: `model input "${spec.name}" takes exactly ${length} tokens: set "padding": "max_length" and "max_length": ${length}`,
      });
  }
  return issues;
}

function audioIssues(name: string, audio: AudioInputConfig, spec: TensorSpec): Issue[] {
  const at = ['processing', 'inputs', name];
  if (!FLOATING.includes(spec.dtype))
    return [{ path: at, message: `recordings become floating-point samples, not ${spec.dtype}` }];
  const mono = spec.shape.length === 2 || (spec.shape.length === 3 && spec.shape[1] === 1);
  if (!mono || spec.shape[0] !== -1)
    return [
      {
        path: at,
        message: `recordings become [batch, samples] (or [batch, 1, samples]) mono tensors; model input "${spec.name}" is [${spec.shape.join(', ')}]`,
      },
    ];
  const samples = spec.shape[spec.shape.length - 1] ?? -1;
  if (samples !== -1 && audio.length !== samples)
    return [
      {
        path: [...at, 'length'],
        message: `model input "${spec.name}" takes ${samples} samples: set "length": ${samples}`,
      },
    ];
  return [];
}

/** The model inputs a processed input makes: [role, model input name] (a text makes several). */
export function processedTensors(name: string, input: ProcessedInputConfig, inputs: TensorSpec[]): [string, string][] {
  if (input.type !== 'text') return [['tensor', input.tensor ?? name]];
  return Object.entries(textTensors(input, inputs)).filter(
    (entry): entry is [string, string] => entry[1] !== undefined,
  );
}

/** A text input's `tensors`, with the defaults that depend on the model's inputs filled in. */
export function textTensors(text: TextInputConfig, inputs: TensorSpec[]): NonNullable<TextInputConfig['tensors']> {
  if (text.tensors) return text.tensors;
  const has = (name: string) => inputs.some((s) => s.name === name);
  return {
    input_ids: 'input_ids',
    ...(has('attention_mask') ? { attention_mask: 'attention_mask' } : {}),
    ...(has('token_type_ids') ? { token_type_ids: 'token_type_ids' } : {}),
  };
}

/**
 * The processed inputs as the worker takes them: what the gateway defaulted from the model's
 * inputs (a text's tensors) written out, so the worker needs no rule of its own.
 */
export function workerProcessing(processing: ProcessingConfig, inputs: TensorSpec[]): ProcessingConfig['inputs'] {
  return Object.fromEntries(
    Object.entries(processing.inputs).map(([name, input]) => [
      name,
      input.type === 'text' ? { ...input, tensors: textTensors(input, inputs) } : input,
    ]),
  );
}
