import { readFileSync } from 'node:fs';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { tgError } from '../errors.js';

/**
 * Role-based access control. A role is a list of grants: permissions on objects named by globs,
 * per kind (models, workflows, training runs, and the server's own surfaces). A caller holds the
 * roles of its API key or JWT (AuthInfo.scopes). A request without a caller is local (stdio, or a
 * server with auth off) and may do everything: there is no one to tell apart.
 *
 * Permissions: `read` (see that it exists, its metadata, its figures), `execute` (run inference),
 * `write` (change a running thing: a run's hyperparameters or state, shared-memory regions),
 * `modify` (load and unload models). A denial never says whether the object exists: the answer
 * for a name the caller may not touch is FORBIDDEN whether or not there is such a thing.
 */

export const PERMISSIONS = ['read', 'write', 'execute', 'modify'] as const;
export type Permission = (typeof PERMISSIONS)[number];

/** Object kinds and their field in a grant. `server` objects: `metrics`, `shared-memory`. */
export const KINDS = { model: 'models', workflow: 'workflows', run: 'runs', server: 'server' } as const;
export type ObjectKind = keyof typeof KINDS;

const GrantSchema = z
  .object({
    permissions: z.array(z.enum(PERMISSIONS)).min(1),
    models: z.array(z.string()).optional(),
    workflows: z.array(z.string()).optional(),
    runs: z.array(z.string()).optional(),
    server: z.array(z.string()).optional(),
  })
  .strict();
export type Grant = z.infer<typeof GrantSchema>;

const RolesFileSchema = z.object({ roles: z.record(z.string(), z.array(GrantSchema)) }).strict();

const ALL = ['*'];

export const BUILTIN_ROLES: Record<string, Grant[]> = {
  admin: [{ permissions: [...PERMISSIONS], models: ALL, workflows: ALL, runs: ALL, server: ALL }],
  inference: [
    { permissions: ['read', 'execute'], models: ALL, workflows: ALL },
    { permissions: ['read', 'write'], server: ['shared-memory'] },
  ],
  monitor: [{ permissions: ['read'], models: ALL, workflows: ALL, runs: ALL, server: ALL }],
};

/** `*` any run of characters, `?` one character; everything else literal. */
function globToRegExp(glob: string): RegExp {
  const escaped = glob
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${escaped}$`);
}

interface CompiledGrant {
  permissions: Set<Permission>;
  patterns: Partial<Record<ObjectKind, RegExp[]>>;
}

export interface Denial {
  caller: string;
  permission: Permission;
  kind: ObjectKind;
  name: string;
}

export class AccessControl {
  private readonly roles = new Map<string, CompiledGrant[]>();
  /** Told of every denied check (the gateway writes it to the audit log). */
  onDenied: (denial: Denial) => void = () => {};

  constructor(custom: Record<string, Grant[]> = {}) {
    for (const [role, grants] of Object.entries({ ...BUILTIN_ROLES, ...custom })) {
      this.roles.set(
        role,
        grants.map((g) => ({
          permissions: new Set(g.permissions),
          patterns: Object.fromEntries(
            (Object.keys(KINDS) as ObjectKind[]).map((kind) => [kind, (g[KINDS[kind]] ?? []).map(globToRegExp)]),
          ),
        })),
      );
    }
  }

  /** Custom roles from a JSON file `{"roles": {"name": [grant, ...]}}`; a built-in name is redefined. */
  static fromFile(path: string | undefined): AccessControl {
    if (!path) return new AccessControl();
    try {
      return new AccessControl(RolesFileSchema.parse(JSON.parse(readFileSync(path, 'utf8'))).roles);
    } catch (err) {
      throw tgError('INVALID_CONFIG', `roles file ${path}: ${(err as Error).message}`, { path });
    }
  }

  get roleNames(): string[] {
    return [...this.roles.keys()];
  }

  /** Whether the caller may; no caller (local, or auth off) may do everything. */
  can(caller: AuthInfo | undefined, permission: Permission, kind: ObjectKind, name: string): boolean {
    if (!caller) return true;
    return caller.scopes.some((role) =>
      (this.roles.get(role) ?? []).some(
        (g) => g.permissions.has(permission) && (g.patterns[kind] ?? []).some((re) => re.test(name)),
      ),
    );
  }

  /** Throws FORBIDDEN unless the caller may; the message does not say whether `name` exists. */
  check(caller: AuthInfo | undefined, permission: Permission, kind: ObjectKind, name: string): void {
    if (this.can(caller, permission, kind, name)) return;
    this.onDenied({ caller: caller?.clientId ?? 'unknown', permission, kind, name });
    throw tgError(
      'FORBIDDEN',
      `${caller?.clientId ?? 'this caller'} (roles: ${caller?.scopes.join(', ') || 'none'}) may not ${permission} ${kind} "${name}"`,
      { permission, kind, name },
    );
  }
}
