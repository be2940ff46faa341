import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { z } from 'zod';
import { tgError } from '../errors.js';

/**
 * API keys, stored hashed. A key reads `tgk_<id>_<secret>`: the id finds the record, the secret
 * (32 random bytes, base64url) is compared by its SHA-256. A slow password hash buys nothing for
 * 256 random bits, and SHA-256 keeps the check at microseconds per request. The file holds only
 * ids, names, roles and hashes (mode 0600); a key is shown once, when it is created.
 */

const KeyRecordSchema = z.object({
  id: z.string().regex(/^[a-z0-9]{12}$/),
  name: z.string(),
  roles: z.array(z.string()).min(1),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  created: z.string(),
  /** Requests per second this key may send; overrides the server's --rate-limit. */
  rate_limit: z.number().positive().optional(),
});
export type KeyRecord = z.infer<typeof KeyRecordSchema>;

const KeyFileSchema = z.object({ keys: z.array(KeyRecordSchema) });

const KEY_PATTERN = /^tgk_([a-z0-9]{12})_([A-Za-z0-9_-]{43})$/;

/** The id and secret of a well-formed key. The secret's alphabet includes `_`, so split on it by position. */
export function parseApiKey(key: string): { id: string; secret: string } | undefined {
  const match = KEY_PATTERN.exec(key);
  return match ? { id: match[1] as string, secret: match[2] as string } : undefined;
}

function sha256(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
}

export class ApiKeyStore {
  private records = new Map<string, KeyRecord>();
  private loadedMtimeMs = -1;

  constructor(readonly path: string) {
    this.refresh();
  }

  private reload(): void {
    if (!existsSync(this.path)) {
      this.records.clear();
      return;
    }
    let parsed: z.infer<typeof KeyFileSchema>;
    try {
      parsed = KeyFileSchema.parse(JSON.parse(readFileSync(this.path, 'utf8')));
    } catch (err) {
      throw tgError('INVALID_CONFIG', `API key file ${this.path} is not valid: ${(err as Error).message}`, {
        path: this.path,
      });
    }
    this.records = new Map(parsed.keys.map((k) => [k.id, k]));
  }

  /** Reads the file again when it changed (keys created or revoked by the CLI while serving). */
  private refresh(): void {
    const mtime = statSync(this.path, { throwIfNoEntry: false })?.mtimeMs ?? -1;
    if (mtime === this.loadedMtimeMs) return;
    this.reload();
    this.loadedMtimeMs = mtime;
  }

  get size(): number {
    this.refresh();
    return this.records.size;
  }

  list(): KeyRecord[] {
    this.refresh();
    return [...this.records.values()];
  }

  /** Creates a key: returns the key itself (shown once) and its record (what is stored). */
  create(name: string, roles: string[], rateLimit?: number): { key: string; record: KeyRecord } {
    this.refresh();
    if (roles.length === 0) throw tgError('BAD_PARAMETER', 'a key needs at least one role (--role)');
    const id = randomBytes(6).toString('hex');
    const secret = randomBytes(32).toString('base64url');
    const record: KeyRecord = {
      id,
      name,
      roles,
      sha256: sha256(secret).toString('hex'),
      created: new Date().toISOString(),
      ...(rateLimit !== undefined ? { rate_limit: rateLimit } : {}),
    };
    this.records.set(id, record);
    this.save();
    return { key: `tgk_${id}_${secret}`, record };
  }

  revoke(id: string): KeyRecord {
    this.refresh();
    const record = this.records.get(id);
    if (!record) throw tgError('KEY_NOT_FOUND', `no API key with id ${id}; tensorgate keys list shows the ids`);
    this.records.delete(id);
    this.save();
    return record;
  }

  /** The record of a valid key, or undefined (unknown id, wrong secret, malformed). */
  verify(key: string): KeyRecord | undefined {
    const parsed = parseApiKey(key);
    if (!parsed) return undefined;
    this.refresh();
    const record = this.records.get(parsed.id);
    if (!record) return undefined;
    return timingSafeEqual(sha256(parsed.secret), Buffer.from(record.sha256, 'hex')) ? record : undefined;
  }

  private save(): void {
    mkdirSync(dirname(this.path), { recursive: true });
    const tmp = `${this.path}.${process.pid}.tmp`;
    writeFileSync(tmp, `${JSON.stringify({ keys: [...this.records.values()] }, null, 2)}\n`, { mode: 0o600 });
    chmodSync(tmp, 0o600);
    // Atomic: a reader sees the old file or the new one, never half of one.
    renameSync(tmp, this.path);
    this.loadedMtimeMs = statSync(this.path).mtimeMs;
  }
}
