import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AuditLog } from '../audit/audit-log.js';
import { tgError } from '../errors.js';
import { CONFIG_FILE, readModelDir, versionFile } from '../registry/repository.js';
import { isSealed, keyId, modelKey, seal, unseal } from '../security/model-encryption.js';
import type { GlobalOptions } from './common.js';

/**
 * `tensorgate encrypt-model DIR`: encrypts each version's weight file with the model key
 * (AES-256-GCM, `<file>.tgenc`), checks the result opens again, points config.json at it and
 * removes the plaintext (unless --keep-plaintext). Files already encrypted are left as they are.
 */

export interface EncryptOptions {
  version?: string;
  keepPlaintext?: boolean;
}

export function runEncryptModel(global: GlobalOptions, dir: string, opts: EncryptOptions): void {
  const key = modelKey();
  if (!key)
    throw tgError(
      'INVALID_CONFIG',
      'no model key: set TENSORGATE_MODEL_KEY (32 bytes as base64 or hex, e.g. from `openssl rand -base64 32`), TENSORGATE_MODEL_KEY_FILE or TENSORGATE_MODEL_KEY_COMMAND',
    );
  const { dir: abs, config } = readModelDir(dir);
  const versions = opts.version ? [opts.version] : Object.keys(config.versions);
  const configPath = join(abs, CONFIG_FILE);
  const raw = JSON.parse(readFileSync(configPath, 'utf8')) as { versions: Record<string, { file: string }> };
  const audit = new AuditLog(global.auditLog ?? '.tensorgate/audit.jsonl');
  for (const version of versions) {
    const entry = raw.versions[version];
    if (!entry) throw tgError('VERSION_NOT_FOUND', `${abs} has no version ${version}`, { version });
    const plainPath = versionFile(abs, version, entry.file);
    const plain = readFileSync(plainPath);
    if (isSealed(plain)) {
      process.stdout.write(`${config.name}@${version}: ${entry.file} is already encrypted\n`);
      continue;
    }
    const sealedName = `${entry.file}.tgenc`;
    const sealedPath = versionFile(abs, version, sealedName);
    const sealed = seal(plain, key);
    // Written aside and renamed: a crash leaves either no encrypted file or a whole one.
    writeFileSync(`${sealedPath}.tmp`, sealed, { mode: 0o600 });
    if (!unseal(readFileSync(`${sealedPath}.tmp`), key, sealedPath).equals(plain))
      throw tgError('INTERNAL', `${sealedPath} did not decrypt to the original; nothing was changed`);
    renameSync(`${sealedPath}.tmp`, sealedPath);
    entry.file = sealedName;
    writeFileSync(`${configPath}.tmp`, `${JSON.stringify(raw, null, 2)}\n`);
    renameSync(`${configPath}.tmp`, configPath);
    if (!opts.keepPlaintext) rmSync(plainPath);
    audit.record({
      actor: `cli:${process.env.USER ?? process.getuid?.() ?? 'unknown'}`,
      action: 'encrypt_model',
      target: `model:${config.name}@${version}`,
      file: sealedName,
      key_id: keyId(key),
    });
    process.stdout.write(
      `${config.name}@${version}: ${sealedName} (AES-256-GCM, key id ${keyId(key)})${opts.keepPlaintext ? '; plaintext kept' : '; plaintext removed'}\n`,
    );
  }
}
