import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import type { AuthInfo, OAuthTokenVerifier } from '@modelcontextprotocol/server';
import { OAuthError, OAuthErrorCode } from '@modelcontextprotocol/server';
import { createRemoteJWKSet, type JWTPayload, type JWTVerifyGetKey, jwtVerify } from 'jose';
import { tgError } from '../errors.js';
import { ApiKeyStore } from './api-keys.js';

/**
 * Who may call the HTTP surfaces (MCP Streamable HTTP, OIP v2, metrics, dashboard): bearer
 * credentials, either tensorgate API keys (api-keys.ts) or JWTs (a shared HS256 secret, or the
 * keys of a JWKS URL), checked for signature, expiry and audience. The result is the SDK's
 * AuthInfo, so MCP tools see the caller as `ctx.http.authInfo`; its `scopes` are the caller's
 * roles.
 */

export type AuthMode = 'auto' | 'on' | 'off';

export interface AuthOptions {
  mode: AuthMode;
  /** API key file (tensorgate keys create writes it). */
  apiKeysPath?: string;
  /** HS256 secret for JWTs, read from a file (or TENSORGATE_JWT_SECRET). */
  jwtSecretFile?: string;
  /** JWKS URL of the identity provider that signs JWTs. */
  jwksUrl?: string;
  /** Required `iss` claim; also advertised as the authorization server. */
  jwtIssuer?: string;
  /** Required `aud` claim (default: the server's MCP URL, the resource of RFC 8707/9728). */
  jwtAudience?: string;
  /** JWT claim holding the roles (an array, or a space-separated string). Default `roles`, then `scope`. */
  rolesClaim?: string;
}

/** A key's validity window as the SDK wants one; API keys live until revoked. */
const API_KEY_HORIZON_S = 3600;

export function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}

export class Authenticator implements OAuthTokenVerifier {
  private readonly keys: ApiKeyStore | undefined;
  private readonly jwtKey: Uint8Array | JWTVerifyGetKey | undefined;

  /** The `aud` a JWT must carry: configured, else the server's MCP URL (set once it listens). */
  audience: string;

  private constructor(private readonly options: AuthOptions) {
    this.audience = options.jwtAudience ?? '';
    this.keys = options.apiKeysPath ? new ApiKeyStore(options.apiKeysPath) : undefined;
    const secret = options.jwtSecretFile
      ? readFileSync(options.jwtSecretFile, 'utf8').trim()
      : process.env.TENSORGATE_JWT_SECRET;
    if (secret !== undefined && secret.length < 32)
      throw tgError('INVALID_CONFIG', 'the JWT secret must be at least 32 characters (HS256 wants 256 bits)');
    if (secret && options.jwksUrl) throw tgError('INVALID_CONFIG', 'give either a JWT secret or a JWKS URL, not both');
    this.jwtKey = secret
      ? new TextEncoder().encode(secret)
      : options.jwksUrl
        ? createRemoteJWKSet(new URL(options.jwksUrl))
        : undefined;
  }

  /**
   * The authenticator for a server bound to `host`, or undefined when auth is off. Called before
   * anything listens, so that a server that would be open where it must not be never starts. `auto` turns
   * auth on for any address but loopback, and whenever credentials are configured; on without
   * any credential to check is refused at start, not discovered by the first caller.
   */
  static create(options: AuthOptions, host: string): Authenticator | undefined {
    const auth = new Authenticator(options);
    const configured = auth.hasCredentials;
    const on = options.mode === 'on' || (options.mode === 'auto' && (!isLoopback(host) || configured));
    if (!on) return undefined;
    if (!configured)
      throw tgError(
        'AUTH_NOT_CONFIGURED',
        `serving on ${host} needs authentication, and no credential is configured: create an API key with \`tensorgate keys create --name NAME --role ROLE\`, or give --jwt-secret-file or --jwks-url; --auth off serves without (only behind a proxy that authenticates)`,
        { host },
      );
    return auth;
  }

  get hasCredentials(): boolean {
    return (this.keys?.size ?? 0) > 0 || this.jwtKey !== undefined;
  }

  get issuer(): string | undefined {
    return this.options.jwtIssuer;
  }

  /** The caller of a request that carries `authorization` (HTTP header or gRPC metadata). */
  async authenticate(authorization: string | undefined): Promise<AuthInfo> {
    const [scheme, token] = (authorization ?? '').split(' ');
    if (scheme?.toLowerCase() !== 'bearer' || !token)
      throw tgError('UNAUTHENTICATED', 'send authorization: Bearer <API key or JWT>');
    try {
      return await this.verifyAccessToken(token);
    } catch (err) {
      throw tgError('UNAUTHENTICATED', (err as Error).message);
    }
  }

  /** OAuthTokenVerifier: a key or a JWT, else OAuthError invalid_token (the SDK answers 401). */
  async verifyAccessToken(token: string): Promise<AuthInfo> {
    if (token.startsWith('tgk_')) {
      const record = this.keys?.verify(token);
      if (!record) throw new OAuthError(OAuthErrorCode.InvalidToken, 'unknown or revoked API key');
      return {
        token,
        clientId: `key:${record.id}`,
        scopes: record.roles,
        expiresAt: Math.floor(Date.now() / 1000) + API_KEY_HORIZON_S,
        extra: {
          name: record.name,
          via: 'api-key',
          ...(record.rate_limit !== undefined ? { rateLimit: record.rate_limit } : {}),
        },
      };
    }
    if (!this.jwtKey)
      throw new OAuthError(OAuthErrorCode.InvalidToken, 'not an API key, and no JWT issuer is configured');
    let payload: JWTPayload;
    try {
      const verified = await jwtVerify(token, this.jwtKey as Uint8Array, {
        audience: this.audience,
        ...(this.options.jwtIssuer ? { issuer: this.options.jwtIssuer } : {}),
        requiredClaims: ['exp', 'sub'],
      });
      payload = verified.payload;
    } catch (err) {
      throw new OAuthError(OAuthErrorCode.InvalidToken, `invalid JWT: ${(err as Error).message}`);
    }
    return {
      token,
      clientId: `jwt:${payload.sub}`,
      scopes: this.rolesOf(payload),
      expiresAt: payload.exp as number,
      extra: { via: 'jwt', ...(payload.iss ? { issuer: payload.iss } : {}) },
    };
  }

  private rolesOf(payload: JWTPayload): string[] {
    const claims = this.options.rolesClaim ? [this.options.rolesClaim] : ['roles', 'scope'];
    for (const claim of claims) {
      const value = payload[claim];
      if (Array.isArray(value)) return value.filter((v): v is string => typeof v === 'string');
      if (typeof value === 'string') return value.split(' ').filter(Boolean);
    }
    return [];
  }
}
