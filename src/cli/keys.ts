import { AuditLog } from '../audit/audit-log.js';
import { ApiKeyStore } from '../security/api-keys.js';
import type { GlobalOptions } from './common.js';

/** `tensorgate keys create|list|revoke`: the API keys a server accepts (stored hashed). */

export const DEFAULT_KEYS_FILE = '.tensorgate/api-keys.json';

function audit(global: GlobalOptions): AuditLog {
  return new AuditLog(global.auditLog ?? '.tensorgate/audit.jsonl');
}

const actor = () => `cli:${process.env.USER ?? process.getuid?.() ?? 'unknown'}`;

export function runKeysCreate(
  global: GlobalOptions,
  opts: { file: string; name: string; role: string[]; rateLimit?: number },
): void {
  const { key, record } = new ApiKeyStore(opts.file).create(opts.name, opts.role, opts.rateLimit);
  audit(global).record({
    actor: actor(),
    action: 'create_api_key',
    target: `key:${record.id}`,
    name: record.name,
    roles: record.roles,
    ...(record.rate_limit !== undefined ? { rate_limit: record.rate_limit } : {}),
  });
  const limit = record.rate_limit !== undefined ? `, ${record.rate_limit} requests/s` : '';
  process.stderr.write(
    `created key ${record.id} (${record.name}, roles ${record.roles.join(', ')}${limit}); it is shown once:\n`,
  );
  process.stdout.write(`${key}\n`);
}

export function runKeysList(opts: { file: string; json?: boolean }): void {
  const keys = new ApiKeyStore(opts.file).list().map(({ sha256: _hash, ...shown }) => shown);
  if (opts.json) {
    process.stdout.write(`${JSON.stringify(keys, null, 2)}\n`);
    return;
  }
  if (keys.length === 0) process.stdout.write(`no API keys in ${opts.file}\n`);
  for (const k of keys)
    process.stdout.write(
      `${k.id}  ${k.name}  roles: ${k.roles.join(', ')}${k.rate_limit !== undefined ? `  ${k.rate_limit} requests/s` : ''}  created ${k.created}\n`,
    );
}

export function runKeysRevoke(global: GlobalOptions, id: string, opts: { file: string }): void {
  const record = new ApiKeyStore(opts.file).revoke(id);
  audit(global).record({ actor: actor(), action: 'revoke_api_key', target: `key:${record.id}`, name: record.name });
  process.stdout.write(`revoked key ${record.id} (${record.name}); servers refuse it from their next request\n`);
}
