import { execSync } from 'node:child_process';
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { tgError } from '../errors.js';

/**
 * Model files encrypted at rest: AES-256-GCM, in the layout the worker reads
 * (python/tensorgate/_sealed.py): `TGENC001` | key id length | key id | nonce | ciphertext | tag,
 * with the magic and the key id authenticated as associated data. The worker decrypts into memory;
 * no plaintext copy is ever written.
 */

export const SEALED_MAGIC = Buffer.from('TGENC001', 'ascii');
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

/** The first 16 hex digits of the key's SHA-256: names a key without revealing it. */
export function keyId(key: Buffer): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 16);
}

function parseKey(text: string, source: string): Buffer {
  const trimmed = text.trim();
  for (const encoding of ['hex', 'base64'] as const) {
    const key = Buffer.from(trimmed, encoding);
    // Buffer.from skips what it cannot decode: insist on a clean round trip and 32 bytes.
    if (key.length === 32 && key.toString(encoding).replace(/=+$/, '') === trimmed.replace(/=+$/, '')) return key;
  }
  throw tgError('INVALID_CONFIG', `${source} does not hold a 32-byte key as base64 or hex`);
}

/**
 * The model key, from `TENSORGATE_MODEL_KEY` (base64 or hex), `TENSORGATE_MODEL_KEY_FILE`, or the
 * output of `TENSORGATE_MODEL_KEY_COMMAND` (the hook for a KMS or a secrets manager), in that
 * order; the worker reads the same variables. Undefined when none is set.
 */
export function modelKey(env: NodeJS.ProcessEnv = process.env): Buffer | undefined {
  if (env.TENSORGATE_MODEL_KEY) return parseKey(env.TENSORGATE_MODEL_KEY, 'TENSORGATE_MODEL_KEY');
  if (env.TENSORGATE_MODEL_KEY_FILE)
    return parseKey(
      readFileSync(env.TENSORGATE_MODEL_KEY_FILE, 'utf8'),
      `TENSORGATE_MODEL_KEY_FILE (${env.TENSORGATE_MODEL_KEY_FILE})`,
    );
  if (env.TENSORGATE_MODEL_KEY_COMMAND)
    return parseKey(
      execSync(env.TENSORGATE_MODEL_KEY_COMMAND, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }),
      'the output of TENSORGATE_MODEL_KEY_COMMAND',
    );
  return undefined;
}

export function isSealed(bytes: Buffer): boolean {
  return bytes.subarray(0, SEALED_MAGIC.length).equals(SEALED_MAGIC);
}

export function seal(plain: Buffer, key: Buffer): Buffer {
  const id = Buffer.from(keyId(key), 'ascii');
  const header = Buffer.concat([SEALED_MAGIC, Buffer.from([id.length]), id]);
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(header);
  const body = Buffer.concat([cipher.update(plain), cipher.final()]);
  return Buffer.concat([header, nonce, body, cipher.getAuthTag()]);
}

/** The plaintext of a sealed file; INVALID_CONFIG naming the cause when it cannot be opened. */
export function unseal(sealed: Buffer, key: Buffer, what: string): Buffer {
  const idLength = sealed[SEALED_MAGIC.length] ?? 0;
  const headerEnd = SEALED_MAGIC.length + 1 + idLength;
  if (!isSealed(sealed) || sealed.length < headerEnd + NONCE_BYTES + TAG_BYTES)
    throw tgError('INVALID_CONFIG', `${what} is not an encrypted model file, or is cut short`);
  const sealedWith = sealed.subarray(SEALED_MAGIC.length + 1, headerEnd).toString('ascii');
  if (sealedWith !== keyId(key))
    throw tgError(
      'INVALID_CONFIG',
      `${what} was encrypted with key id ${sealedWith}; the configured key is ${keyId(key)}`,
    );
  const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(headerEnd, headerEnd + NONCE_BYTES));
  decipher.setAAD(sealed.subarray(0, headerEnd));
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  try {
    return Buffer.concat([
      decipher.update(sealed.subarray(headerEnd + NONCE_BYTES, sealed.length - TAG_BYTES)),
      decipher.final(),
    ]);
  } catch {
    throw tgError(
      'INVALID_CONFIG',
      `${what} failed authentication: the encrypted file was changed after it was written`,
    );
  }
}
