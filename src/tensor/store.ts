import { randomBytes } from 'node:crypto';
import { tgError } from '../errors.js';
import type { Tensor } from './tensor.js';

/**
 * Outputs kept in memory so that agents can fetch them in full (`tensor://ID` resources, served
 * as .npy) or chain them into later calls without the bytes ever leaving the server. Bounded by a
 * byte budget (oldest evicted first) and a time to live.
 */

export const TENSOR_URI_PREFIX = 'tensor://';

/**
 * Heap an entry costs beyond its bytes (the entry, its id and URI, the tensor object, the Map
 * slot): about 700 bytes measured. Counting it keeps the budget true for many tiny outputs,
 * which would otherwise grow the heap far past the budget before anything is evicted.
 */
export const ENTRY_OVERHEAD_BYTES = 1024;

/** Random bytes per id: 72 bits, in 12 base64url characters. */
const ID_BYTES = 9;
/**
 * Ids are cut from a pool of random bytes drawn 256 ids at a time: the same generator, one call
 * to it instead of one per output (randomBytes(9) per call was 2-3% of a small model's MCP call).
 */
let idPool = Buffer.alloc(0);
let idAt = 0;

function randomId(): string {
  if (idAt + ID_BYTES > idPool.length) {
    idPool = randomBytes(ID_BYTES * 256);
    idAt = 0;
  }
  idAt += ID_BYTES;
  return idPool.toString('base64url', idAt - ID_BYTES, idAt);
}

function costOf(tensor: Tensor): number {
  return tensor.data.byteLength + ENTRY_OVERHEAD_BYTES;
}

export interface StoredTensor {
  id: string;
  uri: string;
  tensor: Tensor;
  /** Where it came from, e.g. "image-classifier@1:logits". */
  source: string;
  createdAt: number;
  expiresAt: number;
}

export class TensorStore {
  private readonly entries = new Map<string, StoredTensor>();
  /**
   * The entries in the order they were put, which is also age order: eviction and expiry take
   * from the front, at `head`. Not the Map's own order: V8 leaves a deleted entry's slot in place
   * until the table is rebuilt, and iterating from the front walks past every one of them, so a
   * full store evicting one entry per put took 15 to 360 µs a put, growing with the store's age.
   * An entry a lookup found expired (and deleted) stays here until the front reaches it.
   */
  private age: (StoredTensor | undefined)[] = [];
  private head = 0;
  private bytes = 0;

  /**
   * With a `replica` name (several replicas behind one address), ids are `REPLICA.RANDOM`, so a
   * replica handed another's handle can say where it lives (HANDLE_ELSEWHERE) instead of
   * claiming it expired. docs/deploy.md argues for this over a store shared between replicas.
   */
  constructor(
    private readonly maxBytes: number,
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
    private readonly replica?: string,
  ) {}

  get usedBytes(): number {
    return this.bytes;
  }

  get size(): number {
    return this.entries.size;
  }

  put(tensor: Tensor, source: string): StoredTensor {
    this.sweep();
    const size = costOf(tensor);
    while (this.bytes + size > this.maxBytes) {
      const oldest = this.oldest();
      if (!oldest) break;
      this.dropOldest(oldest);
    }
    const random = randomId();
    const id = this.replica === undefined ? random : `${this.replica}.${random}`;
    const createdAt = this.now();
    const entry: StoredTensor = {
      id,
      uri: `${TENSOR_URI_PREFIX}${id}`,
      tensor,
      source,
      createdAt,
      expiresAt: createdAt + this.ttlMs,
    };
    // A tensor larger than the whole budget is still handed out; it simply evicts everything else.
    this.entries.set(id, entry);
    this.age.push(entry);
    this.bytes += size;
    return entry;
  }

  /** Looks up `tensor://ID` (or a bare ID); HANDLE_NOT_FOUND when unknown, evicted or expired. */
  get(uriOrId: string): StoredTensor {
    const id = uriOrId.startsWith(TENSOR_URI_PREFIX) ? uriOrId.slice(TENSOR_URI_PREFIX.length) : uriOrId;
    const entry = this.entries.get(id);
    if (!entry) this.checkOwner(id);
    if (!entry || entry.expiresAt <= this.now()) {
      if (entry) this.delete(id);
      throw tgError(
        'HANDLE_NOT_FOUND',
        `${TENSOR_URI_PREFIX}${id} is unknown or has expired (outputs are kept ${Math.round(this.ttlMs / 1000)} s); ` +
          'run the call that produced it again, or pass the tensor another way',
        { handle: `${TENSOR_URI_PREFIX}${id}` },
      );
    }
    return entry;
  }

  /** HANDLE_ELSEWHERE for an id another replica made (random parts never hold a dot). */
  private checkOwner(id: string): void {
    const dot = id.lastIndexOf('.');
    if (dot <= 0) return;
    const owner = id.slice(0, dot);
    if (owner === this.replica) return;
    throw tgError(
      'HANDLE_ELSEWHERE',
      `${TENSOR_URI_PREFIX}${id} was made by replica ${owner}, and this request reached replica ${this.replica ?? '(unnamed)'}; ` +
        'a handle lives in the memory of the replica that made it. Keep a session on one replica ' +
        '(the load balancer routes on the Mcp-Session-Id header or the client address), or send the tensor itself (b64 or path)',
      { handle: `${TENSOR_URI_PREFIX}${id}`, replica: owner, here: this.replica ?? null },
    );
  }

  list(): StoredTensor[] {
    this.sweep();
    return [...this.entries.values()];
  }

  private sweep(): void {
    const now = this.now();
    for (let oldest = this.oldest(); oldest && oldest.expiresAt <= now; oldest = this.oldest()) {
      this.dropOldest(oldest); // Same TTL for all: the ones behind it are younger.
    }
  }

  /** The oldest entry still stored; passes over the ones a lookup deleted. */
  private oldest(): StoredTensor | undefined {
    while (this.head < this.age.length) {
      const entry = this.age[this.head] as StoredTensor;
      if (this.entries.get(entry.id) === entry) return entry;
      this.age[this.head++] = undefined;
    }
    return undefined;
  }

  /** Deletes `oldest` (what oldest() returned) and moves the front past it. */
  private dropOldest(oldest: StoredTensor): void {
    this.age[this.head++] = undefined;
    // oldest() found it stored: no lookup to repeat.
    this.entries.delete(oldest.id);
    this.bytes -= costOf(oldest.tensor);
    // The front's slots are reclaimed once they are half the array: each entry is copied O(1) times.
    if (this.head >= 1024 && this.head * 2 >= this.age.length) {
      this.age = this.age.slice(this.head);
      this.head = 0;
    }
  }

  private delete(id: string): void {
    const entry = this.entries.get(id);
    if (!entry) return;
    this.entries.delete(id);
    this.bytes -= costOf(entry.tensor);
  }
}
