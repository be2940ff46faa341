import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { decodeNpy } from '../../src/tensor/npy.js';
import { toNumbers } from '../../src/tensor/tensor.js';
import { type Connected, connect } from '../helpers/mcp.js';
import { PYTHON, ROOT } from '../helpers/models.js';

/**
 * examples/transformers, end to end: a Hugging Face sequence classifier saved with
 * save_pretrained (a small randomly initialised BERT, built locally) becomes a model folder, is
 * served, and answers texts through its own tool with the logits transformers itself computes
 * from the same saved folder (its tokenizer with padding and truncation, then the model).
 */

const MAX_LENGTH = 16;
const TEXTS = [
  'the film was wonderful',
  'Dull!',
  // Longer than MAX_LENGTH tokens: both sides cut it, keeping [CLS] and [SEP].
  'a dull plot, wooden dialogue and far too long; nothing works: the sound, the pictures, the story',
];

describe('a transformers sequence classifier saved locally (examples/transformers)', () => {
  let server: Connected;
  let saved: string;
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-transformers-'));
    saved = join(dir, 'saved');
    const fixture = join(ROOT, 'test/fixtures/tiny_transformers_classifier.py');
    execFileSync(PYTHON, [fixture, 'save', saved], { stdio: ['ignore', 'ignore', 'inherit'] });
    execFileSync(
      PYTHON,
      [
        join(ROOT, 'examples/transformers/export_classifier.py'),
        saved,
        join(dir, 'models', 'sentiment'),
        '--max-length',
        String(MAX_LENGTH),
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    server = await connect('stdio', undefined, [], join(dir, 'models'));
  });
  after(async () => {
    await server?.close();
  });

  it('answers each text with the logits transformers gives, token_type_ids and truncation included', async () => {
    const reference = JSON.parse(
      execFileSync(
        PYTHON,
        [join(ROOT, 'test/fixtures/tiny_transformers_classifier.py'), 'reference', saved, String(MAX_LENGTH), ...TEXTS],
        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] },
      ),
    ) as number[][];
    const result = (await server.client.callTool({
      name: 'infer',
      arguments: { model: 'sentiment', inputs: { text: TEXTS } },
    })) as { isError?: boolean; content: { text?: string }[]; structuredContent?: Record<string, unknown> };
    assert.notEqual(result.isError, true, result.content[0]?.text);
    const { outputs } = result.structuredContent as { outputs: { uri: string; shape: number[] }[] };
    assert.deepEqual(outputs[0]?.shape, [3, 3]);
    const read = await server.client.readResource({ uri: outputs[0]?.uri as string });
    const logits = toNumbers(decodeNpy(Buffer.from((read.contents[0] as { blob: string }).blob, 'base64')));
    reference.flat().forEach((expected, i) => {
      assert.ok(Math.abs((logits[i] as number) - expected) < 1e-4, `logit ${i}: ${logits[i]} vs ${expected}`);
    });
    // The model's own tool answers its labels, best first, as softmax of those logits.
    const tool = (await server.client.callTool({ name: 'sentiment', arguments: { text: TEXTS[0] } })) as {
      structuredContent?: { predictions: { label: string; score: number }[][] };
    };
    const row = reference[0] as number[];
    const best = row.indexOf(Math.max(...row));
    assert.equal(tool.structuredContent?.predictions[0]?.[0]?.label, ['negative', 'neutral', 'positive'][best]);
  });
});
