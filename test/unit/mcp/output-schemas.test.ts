import assert from 'node:assert/strict';
import { test } from 'node:test';
import { z } from 'zod';
import { convertedOnce, definedOnce } from '../../../src/mcp/output-schemas.js';

const target = { target: 'draft-2020-12' };
const shape = () => z.object({ model: z.string().describe('a name'), rows: z.number().int().min(1).optional() });

test('a schema converted once hands out the same JSON Schema, equal to a fresh conversion', () => {
  const schema = convertedOnce(shape());
  const first = schema['~standard'].jsonSchema.input(target);
  assert.equal(schema['~standard'].jsonSchema.input(target), first, 'the second conversion is the first');
  assert.deepEqual(first, shape()['~standard'].jsonSchema.input(target));
  assert.deepEqual(schema['~standard'].jsonSchema.output(target), shape()['~standard'].jsonSchema.output(target));
  // Another target is converted on its own.
  const other = schema['~standard'].jsonSchema.input({ target: 'draft-07' });
  assert.notEqual(other, first);
  assert.deepEqual(other, shape()['~standard'].jsonSchema.input({ target: 'draft-07' }));
});

test('validation is untouched, and converting again wraps nothing twice', async () => {
  const schema = convertedOnce(shape());
  const standard = schema['~standard'];
  assert.equal(convertedOnce(schema)['~standard'], standard);
  assert.deepEqual(await standard.validate({ model: 'm', rows: 2 }), { value: { model: 'm', rows: 2 } });
  const refused = await standard.validate({ model: 1 });
  assert.ok('issues' in refused && refused.issues && refused.issues.length > 0);
  assert.throws(() => schema.parse({ rows: 0 }));
});

test('a definition advertises its output schema as it is, trusts results, and still checks its input', async () => {
  const input = z.object({ model: z.string() });
  const output = shape();
  const config = { title: 't', inputSchema: input, outputSchema: output };
  const defined = definedOnce(config);
  const trusted = defined.outputSchema?.['~standard'];
  assert.ok(trusted);
  assert.notEqual(defined.outputSchema, output, 'the SDK is handed a wrapper, not the zod schema');
  assert.equal(config.outputSchema, output, 'the definition given is not changed');
  // The JSON Schema the tool advertises (what clients validate against) is the zod schema's.
  assert.deepEqual(
    trusted.jsonSchema.output({ target: 'draft-2020-12' }),
    shape()['~standard'].jsonSchema.output(target),
  );
  assert.equal(trusted.vendor, 'zod');
  // Results are taken as they are, even one the schema would refuse; the zod schema still refuses it.
  assert.deepEqual(await trusted.validate({ model: 1 }), { value: { model: 1 } });
  const refused = await output['~standard'].validate({ model: 1 });
  assert.ok('issues' in refused && refused.issues && refused.issues.length > 0);
  // Arguments are still checked.
  const bad = await defined.inputSchema['~standard'].validate({ model: 2 });
  assert.ok('issues' in bad && bad.issues && bad.issues.length > 0);
});
