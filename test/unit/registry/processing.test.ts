import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseModelConfig } from '../../../src/registry/model-config.js';
import { type ProcessingConfig, workerProcessing } from '../../../src/registry/processing.js';

/** The processing section is checked against the rest of the config, with errors naming the field. */

const base = {
  name: 'classifier',
  inputs: [{ name: 'pixels', dtype: 'float32', shape: [-1, 3, 224, 224] }],
  outputs: [{ name: 'logits', dtype: 'float32', shape: [-1, 10] }],
  versions: { '1': { format: 'export', file: 'model.pt2' } },
};
const imagenet = {
  type: 'image',
  tensor: 'pixels',
  resize: { shorter: 256 },
  center_crop: [224, 224],
  mean: [0.485, 0.456, 0.406],
  std: [0.229, 0.224, 0.225],
};

function issues(processing: unknown, overrides: Record<string, unknown> = {}): string {
  try {
    parseModelConfig({ ...base, ...overrides, processing }, 'config.json');
  } catch (err) {
    assert.equal((err as { code?: string }).code, 'INVALID_CONFIG');
    return (err as Error).message;
  }
  assert.fail('the config was accepted');
}

test('a torchvision-style image pipeline is accepted, with its defaults filled in', () => {
  const cfg = parseModelConfig(
    { ...base, processing: { inputs: { image: imagenet }, output: { type: 'classification' } } },
    'c',
  );
  const image = cfg.processing?.inputs.image;
  assert.equal(image?.type, 'image');
  if (image?.type !== 'image') return;
  assert.equal(image.mode, 'RGB');
  assert.equal(image.layout, 'CHW');
  assert.equal(image.max_pixels, 50_000_000);
  assert.deepEqual(image.formats, ['png', 'jpeg', 'webp', 'gif', 'bmp']);
  assert.equal(image.resize?.interpolation, 'bilinear');
  const output = cfg.processing?.output;
  assert.equal(output?.type === 'classification' && output.activation, 'softmax');
  assert.equal(output?.type === 'classification' && output.top_k, 5);
});

test('processed images must become the model input they name, at its size and channels', () => {
  assert.match(
    issues({ inputs: { image: { ...imagenet, tensor: 'image' } } }),
    /processing\.inputs\.image\.tensor: no model input "image"; the model takes "pixels"/,
  );
  assert.match(
    issues({ inputs: { image: { ...imagenet, center_crop: [200, 200] } } }),
    /processing\.inputs\.image: the images become \[batch, 3, 200, 200\] \(CHW, RGB\) but model input "pixels" is \[-1, 3, 224, 224\]/,
  );
  assert.match(
    issues({ inputs: { image: { ...imagenet, mode: 'L', mean: undefined, std: undefined } } }),
    /\[batch, 1, 224, 224\] \(CHW, L\)/,
  );
  assert.match(
    issues({ inputs: { image: { ...imagenet, mean: [0.5, 0.5] } } }),
    /processing\.inputs\.image\.mean: mean has 2 values for 3 channel/,
  );
  assert.match(
    issues({ inputs: { image: { type: 'image', tensor: 'pixels' } } }),
    /model input "pixels" has a fixed size: set resize\.size or center_crop/,
  );
  assert.match(
    issues({ inputs: { image: { ...imagenet, resize: { shorter: 256, size: [224, 224] } } } }),
    /resize takes one of "shorter".*or "size"/,
  );
  assert.match(
    issues({ inputs: { image: { ...imagenet, formats: ['tiff'] } } }),
    /processing\.inputs\.image\.formats\.0/,
  );
  assert.match(issues({ inputs: { image: { ...imagenet, sharpen: true } } }), /sharpen/);
});

test('every model input is made by processing, on the torch engine', () => {
  const two = {
    inputs: [...base.inputs, { name: 'mask', dtype: 'float32', shape: [-1, 1, 224, 224] }],
  };
  assert.match(issues({ inputs: { image: imagenet } }, two), /model input "mask" is made by no processed input/);
  assert.match(
    issues({ inputs: { a: imagenet, b: imagenet } }),
    /processing\.inputs\.b\.tensor: model input "pixels" is already made by "a"/,
  );
  assert.match(
    issues({ inputs: { image: imagenet } }, { engine: 'onnx', versions: { '1': { format: 'onnx', file: 'm.onnx' } } }),
    /processing: processing runs in the torch worker; engine "onnx" has none/,
  );
});

test('a classification output names a [batch, classes] output', () => {
  const outputs = [...base.outputs, { name: 'features', dtype: 'float32', shape: [-1, 4, 4] }];
  assert.match(
    issues({ inputs: { image: imagenet }, output: { type: 'classification' } }, { outputs }),
    /processing\.output\.tensor: the model has several outputs: name the one the classification answer is made of/,
  );
  assert.match(
    issues({ inputs: { image: imagenet }, output: { type: 'classification', tensor: 'features' } }, { outputs }),
    /reads \[batch, classes\] scores; "features" has shape \[-1, 4, 4\]/,
  );
  assert.match(
    issues({ inputs: { image: imagenet }, output: { type: 'classification', top_k: 0 } }),
    /processing\.output\.top_k/,
  );
});

const textModel = {
  ...base,
  inputs: [
    { name: 'input_ids', dtype: 'int64', shape: [-1, -1] },
    { name: 'attention_mask', dtype: 'int64', shape: [-1, -1] },
  ],
};

test('a text input makes the token ids and, where the model has one, the attention mask', () => {
  const cfg = parseModelConfig({ ...textModel, processing: { inputs: { text: { type: 'text' } } } }, 'c');
  const text = cfg.processing?.inputs.text;
  assert.equal(text?.type, 'text');
  if (text?.type !== 'text') return;
  assert.equal(text.tokenizer, 'tokenizer.json');
  assert.equal(text.max_length, 512);
  assert.equal(text.truncation, 'truncate');
  assert.equal(text.padding, 'longest');
  assert.deepEqual(workerProcessing(cfg.processing as ProcessingConfig, cfg.inputs).text, {
    ...text,
    tensors: { input_ids: 'input_ids', attention_mask: 'attention_mask' },
  });
});

test('text inputs are checked against the model inputs they make', () => {
  assert.match(
    issues(
      { inputs: { text: { type: 'text' } } },
      { inputs: [{ name: 'input_ids', dtype: 'float32', shape: [-1, -1] }] },
    ),
    /processing\.inputs\.text\.tensors: token ids and masks are int64 or int32 tensors; model input "input_ids" is float32/,
  );
  assert.match(
    issues(
      { inputs: { text: { type: 'text' } } },
      { inputs: [{ name: 'input_ids', dtype: 'int64', shape: [-1, 32] }] },
    ),
    /model input "input_ids" takes exactly 32 tokens: set "padding": "max_length" and "max_length": 32/,
  );
  assert.match(
    issues({ inputs: { text: { type: 'text', tensors: { input_ids: 'ids' } } } }, textModel),
    /processing\.inputs\.text\.tensors\.input_ids: no model input "ids"/,
  );
  assert.match(
    issues({ inputs: { text: { type: 'text', tokenizer: '../../etc/passwd' } } }, textModel),
    /processing\.inputs\.text\.tokenizer: the tokenizer is a file in the version folder/,
  );
  assert.match(
    issues({ inputs: { text: { type: 'text', tensors: { input_ids: 'input_ids' } } } }, textModel),
    /model input "attention_mask" is made by no processed input/,
  );
});

test('audio inputs are checked against the model input they make', () => {
  const audio = { type: 'audio', tensor: 'wave', sample_rate: 16000 };
  const wave = (shape: number[]) => ({ inputs: [{ name: 'wave', dtype: 'float32', shape }] });
  assert.doesNotThrow(() =>
    parseModelConfig(
      { ...base, ...wave([-1, 1, 16000]), processing: { inputs: { a: { ...audio, length: 16000 } } } },
      'c',
    ),
  );
  assert.match(
    issues({ inputs: { a: audio } }, wave([-1, 16000])),
    /processing\.inputs\.a\.length: model input "wave" takes 16000 samples: set "length": 16000/,
  );
  assert.match(
    issues({ inputs: { a: audio } }, wave([-1, 2, -1])),
    /recordings become \[batch, samples\] \(or \[batch, 1, samples\]\) mono tensors/,
  );
  assert.match(issues({ inputs: { a: { type: 'audio', tensor: 'wave' } } }, wave([-1, -1])), /sample_rate/);
});

test('an embedding output names a floating-point [batch, dims] output', () => {
  const cfg = parseModelConfig(
    { ...base, processing: { inputs: { image: imagenet }, output: { type: 'embedding' } } },
    'c',
  );
  assert.deepEqual(cfg.processing?.output, { type: 'embedding', normalize: false });
  assert.match(
    issues(
      { inputs: { image: imagenet }, output: { type: 'embedding' } },
      { outputs: [{ name: 'v', dtype: 'int64', shape: [-1, 64] }] },
    ),
    /processing\.output\.tensor: an embedding is a floating-point output; "v" is int64/,
  );
  assert.match(
    issues(
      { inputs: { image: imagenet }, output: { type: 'embedding' } },
      { outputs: [{ name: 'v', dtype: 'float32', shape: [-1, 4, 64] }] },
    ),
    /an embedding is \[batch, dims\]; "v" has shape \[-1, 4, 64\]/,
  );
});

test('a handler makes the model inputs itself: only its "module:Class" form is checked', () => {
  const handled = { handler: 'handler:Photos', inputs: { photo: { type: 'image' } } };
  assert.doesNotThrow(() => parseModelConfig({ ...base, processing: handled }, 'c'));
  assert.match(
    issues({ ...handled, handler: 'handler.py' }),
    /processing\.handler: a handler is "module:Class", the module a \.py file in the version folder/,
  );
});

test('image and mask outputs name a picture-shaped output', () => {
  const image = { inputs: { image: imagenet }, output: { type: 'image' } };
  assert.doesNotThrow(() =>
    parseModelConfig(
      { ...base, outputs: [{ name: 'p', dtype: 'float32', shape: [-1, 3, 64, 64] }], processing: image },
      'c',
    ),
  );
  assert.match(
    issues(image, { outputs: [{ name: 'p', dtype: 'float32', shape: [-1, 2, 64, 64] }] }),
    /processing\.output\.tensor: an image output has 1, 3 or 4 channels, laid out CHW; "p" has shape \[-1, 2, 64, 64\]/,
  );
  assert.match(
    issues(
      { inputs: { image: imagenet }, output: { type: 'mask' } },
      { outputs: [{ name: 'm', dtype: 'float32', shape: [-1, 64, 64] }] },
    ),
    /a mask is \[batch, height, width\] integer class ids or \[batch, classes, height, width\] scores; "m" has shape \[-1, 64, 64\] \(float32\)/,
  );
});

test('a text output names a [batch, tokens] integer output', () => {
  assert.match(
    issues(
      { inputs: { image: imagenet }, output: { type: 'text' } },
      { outputs: [{ name: 'ids', dtype: 'float32', shape: [-1, -1] }] },
    ),
    /processing\.output\.tensor: a text output is \[batch, tokens\] int64 or int32 token ids; "ids" has shape \[-1, -1\] \(float32\)/,
  );
});

test('a detection output names its box, score and class outputs, checked against the model', () => {
  const detector = {
    outputs: [
      { name: 'boxes', dtype: 'float32', shape: [-1, 100, 4] },
      { name: 'logits', dtype: 'float32', shape: [-1, 100, 3], labels: ['cat', 'dog', 'none'] },
      { name: 'scores', dtype: 'float32', shape: [-1, 100] },
      { name: 'classes', dtype: 'int64', shape: [-1, 100] },
    ],
  };
  const inputs = { image: imagenet };
  const cfg = parseModelConfig(
    {
      ...base,
      ...detector,
      processing: { inputs, output: { type: 'detection', scores: 'logits', activation: 'softmax', background: 2 } },
    },
    'c',
  );
  const output = cfg.processing?.output;
  assert.equal(output?.type, 'detection');
  if (output?.type !== 'detection') return;
  assert.equal(output.boxes, 'boxes');
  assert.equal(output.box_format, 'xyxy');
  assert.equal(output.threshold, 0.5);
  assert.equal(output.iou_threshold, 0.5);
  assert.equal(output.max_detections, 100);
  // One score per box with its class ids in another output.
  parseModelConfig(
    { ...base, ...detector, processing: { inputs, output: { type: 'detection', labels: 'classes' } } },
    'c',
  );

  const detection = (output: Record<string, unknown>, processing: Record<string, unknown> = {}) =>
    issues({ inputs, output: { type: 'detection', ...output }, ...processing }, detector);
  assert.match(
    detection({ boxes: 'box' }),
    /processing\.output\.boxes: no model output "box"; the model answers "boxes"/,
  );
  assert.match(
    detection({ boxes: 'scores', labels: 'classes' }),
    /boxes are \[batch, boxes, 4\] floating-point; "scores" is \[-1, 100\]/,
  );
  assert.match(
    detection({}),
    /processing\.output\.labels: "scores" has one score per box: name the output holding each box's class id/,
  );
  assert.match(
    detection({ scores: 'logits', labels: 'classes' }),
    /"logits" has a score per class, which gives each box its class: leave "labels" out/,
  );
  assert.match(
    detection({ labels: 'scores' }),
    /class ids are \[batch, boxes\] integers; "scores" is \[-1, 100\] float32/,
  );
  assert.match(
    detection({ labels: 'classes', activation: 'softmax' }),
    /processing\.output\.activation: softmax needs a score per class/,
  );
  assert.match(
    detection({ scores: 'logits', background: 3 }),
    /processing\.output\.background: class 3 is past the 3 classes of "logits"/,
  );
  assert.match(
    detection({ labels: 'classes', image: 'photo' }),
    /processing\.output\.image: no image input "photo"; the image inputs are "image"/,
  );
  assert.match(
    detection({ labels: 'classes' }, { handler: 'mine:Handler' }),
    /processing\.output: a detection output maps boxes back through the image steps, which a handler replaces/,
  );
  assert.match(detection({ labels: 'classes', box_format: 'ltrb' }), /processing\.output\.box_format/);
});
