import assert from 'node:assert/strict';
import { test } from 'node:test';
import { z } from 'zod';
import { convertedOnce } from '../../../src/mcp/output-schemas.js';

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
