import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The model bench/processing and bench/jobs serve: the demo image-classifier (`.pt2`, ResNet-18
 * shape) as `photo-classifier`, version 1 only, with processing (resize the shorter side to 256,
 * crop 224, ImageNet mean and std, softmax top 5) and batching (16 rows, 0.5 ms).
 */

export const MODEL = 'photo-classifier';
export const BATCHING = { max_batch_size: 16, max_queue_delay_us: 500 };
export const PROCESSING = {
  inputs: {
    image: {
      type: 'image',
      description: 'a photo',
      resize: { shorter: 256 },
      center_crop: [224, 224],
      mean: [0.485, 0.456, 0.406],
      std: [0.229, 0.224, 0.225],
    },
  },
  output: { type: 'classification', top_k: 5 },
};

/** Writes the model folder into `models` from the demo repository `demo`; returns its path. */
export function makeModel(demo: string, models: string): string {
  const dir = join(models, MODEL);
  cpSync(join(demo, 'image-classifier'), dir, { recursive: true, filter: (src) => !src.includes('/2') });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  config.name = MODEL;
  config.versions = { '1': (config.versions as Record<string, unknown>)['1'] };
  config.parameters = { precision: ['fp32'] };
  config.batching = BATCHING;
  config.processing = PROCESSING;
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  return dir;
}
