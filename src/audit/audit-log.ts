import { appendFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Append-only audit trail: one JSON object per line, written synchronously before the action it
 * records is reported done, so a crash never loses an entry for a change that took effect.
 * Entries name who did what to which object and the values involved; never secrets or tensors.
 */

export interface AuditEntry {
  /** Who asked: an MCP client, a CLI user, or `gateway` for what tensorgate observed itself. */
  actor: string;
  action: string;
  /** What it acted on, e.g. `run:mnist-1234-ab12cd`. */
  target: string;
  [detail: string]: unknown;
}

export class AuditLog {
  constructor(readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
  }

  record(entry: AuditEntry): void {
    const line = JSON.stringify({ time: new Date().toISOString(), ...entry });
    // O_APPEND: concurrent writers (several gateways) interleave whole lines, never bytes.
    appendFileSync(this.path, `${line}\n`, { mode: 0o600 });
  }
}
