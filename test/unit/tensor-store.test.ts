import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TensorgateError } from '../../src/errors.js';
import { ENTRY_OVERHEAD_BYTES, TensorStore } from '../../src/tensor/store.js';
import type { Tensor } from '../../src/tensor/tensor.js';

const tensor = (bytes: number): Tensor => ({ dtype: 'uint8', shape: [bytes], data: new Uint8Array(bytes) });

test('hands out tensor:// handles and finds them again', () => {
  const store = new TensorStore(1024, 60_000);
  const entry = store.put(tensor(4), 'm@1:y');
  assert.match(entry.uri, /^tensor:\/\/[\w-]+$/);
  assert.equal(store.get(entry.uri).tensor.data.byteLength, 4);
  assert.equal(store.get(entry.id).source, 'm@1:y');
});

test('ids are 72 random bits each, distinct across many pools of them', () => {
  const store = new TensorStore(1 << 30, 60_000);
  const ids = Array.from({ length: 2000 }, () => store.put(tensor(1), 'm@1:y').id);
  assert.ok(
    ids.every((id) => /^[\w-]{12}$/.test(id)),
    ids.find((id) => !/^[\w-]{12}$/.test(id)),
  );
  assert.equal(new Set(ids).size, ids.length);
  // Every byte value shows up in the ids' bits: they are cut from random bytes, not from a counter.
  const bytes = Buffer.concat(ids.map((id) => Buffer.from(id, 'base64url')));
  assert.equal(new Set(bytes).size, 256);
});

test('expired handles give HANDLE_NOT_FOUND with a hint', () => {
  let now = 0;
  const store = new TensorStore(1024, 1000, () => now);
  const entry = store.put(tensor(4), 'm@1:y');
  now = 999;
  assert.ok(store.get(entry.uri));
  now = 1000;
  assert.throws(
    () => store.get(entry.uri),
    (err: Error & { code?: string }) => {
      assert.equal(err.code, 'HANDLE_NOT_FOUND');
      assert.match(err.message, /expired.*run the call that produced it again/);
      return true;
    },
  );
  assert.equal(store.usedBytes, 0);
});

test('evicts the oldest tensors to stay within the byte budget', () => {
  const store = new TensorStore(100 + 2 * ENTRY_OVERHEAD_BYTES, 60_000);
  const a = store.put(tensor(40), 'a');
  const b = store.put(tensor(40), 'b');
  const c = store.put(tensor(40), 'c');
  assert.throws(() => store.get(a.uri), /unknown or has expired/);
  assert.ok(store.get(b.uri) && store.get(c.uri));
  assert.equal(store.usedBytes, 80 + 2 * ENTRY_OVERHEAD_BYTES);
});

test('a full store keeps evicting in age order, one entry per put, across many puts', () => {
  const store = new TensorStore(10 * (12 + ENTRY_OVERHEAD_BYTES), 60_000);
  const entries = Array.from({ length: 5000 }, (_, i) => store.put(tensor(12), `m@1:y#${i}`));
  assert.equal(store.size, 10);
  assert.equal(store.usedBytes, 10 * (12 + ENTRY_OVERHEAD_BYTES));
  for (const entry of entries.slice(-10)) assert.equal(store.get(entry.uri).source, entry.source);
  for (const entry of entries.slice(0, -10)) assert.throws(() => store.get(entry.uri), /unknown or has expired/);
});

test('expiry and eviction pass over an entry a lookup already found expired', () => {
  let now = 0;
  const store = new TensorStore(2 * (4 + ENTRY_OVERHEAD_BYTES), 1000, () => now);
  const a = store.put(tensor(4), 'a');
  now = 600;
  const b = store.put(tensor(4), 'b');
  now = 1000;
  assert.throws(() => store.get(a.uri), /unknown or has expired/); // deleted by the lookup
  assert.equal(store.size, 1);
  const c = store.put(tensor(4), 'c'); // b (expires at 1600) is the oldest left: kept
  assert.ok(store.get(b.uri) && store.get(c.uri));
  const d = store.put(tensor(4), 'd'); // over the budget: b goes, not the a already gone
  assert.throws(() => store.get(b.uri), /unknown or has expired/);
  assert.ok(store.get(c.uri) && store.get(d.uri));
  assert.equal(store.usedBytes, 2 * (4 + ENTRY_OVERHEAD_BYTES));
  now = 2600; // c and d expire; the next put finds the store empty
  const e = store.put(tensor(4), 'e');
  assert.equal(store.size, 1);
  assert.equal(store.get(e.uri).source, 'e');
});

test('entries expire in age order while calls keep coming', () => {
  let now = 0;
  const store = new TensorStore(1 << 30, 100, () => now);
  let last = store.put(tensor(4), 'first');
  for (let i = 1; i < 5000; i++) {
    now = i;
    last = store.put(tensor(4), `#${i}`);
  }
  assert.equal(store.size, 100, 'the last 100 ms of puts');
  assert.equal(store.list()[0]?.source, '#4900');
  assert.equal(store.get(last.uri).source, '#4999');
});

test('counts what each entry costs beyond its bytes, so tiny outputs cannot grow without bound', () => {
  const store = new TensorStore(100 * ENTRY_OVERHEAD_BYTES, 60_000);
  for (let i = 0; i < 10_000; i++) store.put(tensor(12), 'tiny');
  assert.ok(store.size < 100, `${store.size} entries kept`);
});

test('a replica names its handles; one made by another replica is HANDLE_ELSEWHERE, naming both', () => {
  const a = new TensorStore(1 << 20, 60_000, Date.now, 'gw-7d9f-a');
  const b = new TensorStore(1 << 20, 60_000, Date.now, 'gw-7d9f-b');
  const made = a.put(tensor(4), 'm@1:y');
  assert.match(made.uri, /^tensor:\/\/gw-7d9f-a\.[\w-]{12}$/);
  assert.equal(a.get(made.uri), made);
  assert.throws(
    () => b.get(made.uri),
    (err: TensorgateError) =>
      err.code === 'HANDLE_ELSEWHERE' &&
      /made by replica gw-7d9f-a, and this request reached replica gw-7d9f-b/.test(err.message) &&
      err.data.replica === 'gw-7d9f-a',
  );
  // Its own handle, expired or unknown, is still HANDLE_NOT_FOUND.
  assert.throws(() => b.get('tensor://gw-7d9f-b.AAAAAAAAAAAA'), { code: 'HANDLE_NOT_FOUND' });
  assert.throws(() => new TensorStore(1 << 20, 60_000).get(made.uri), { code: 'HANDLE_ELSEWHERE' });
});
