import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './ports.js';

/**
 * A throwaway PostgreSQL server on loopback, from Debian's `postgresql` package (installed by
 * scripts/setup.sh --test): its own data folder, a free port, trust authentication, no fsync.
 * PostgreSQL refuses to run as root, so as root (CI) it runs as the package's `postgres` user.
 */

const run = promisify(execFile);

export interface Postgres {
  /** postgres://USER:PASSWORD@127.0.0.1:PORT/postgres (trust auth: the password is never checked). */
  url: string;
  port: number;
  /** Stops the server, fast: connected clients are cut off. */
  stop: () => Promise<void>;
  /** Starts it again on the same port, with the same data. */
  start: () => Promise<void>;
  /** Stops it and removes its data. */
  destroy: () => Promise<void>;
}

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  const found = versions.map((v) => join(root, v, 'bin')).find((dir) => existsSync(join(dir, 'pg_ctl')));
  if (!found) throw new Error('PostgreSQL is not installed: run scripts/setup.sh --test (apt-get install postgresql)');
  return found;
}

export async function startPostgres(password = 'not-checked'): Promise<Postgres> {
  const bin = binDir();
  const root = process.getuid?.() === 0;
  const home = mkdtempSync(join(tmpdir(), 'tg-pg-'));
  const data = join(home, 'data');
  if (root) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(home, Number(stdout), Number(gid));
  }
  const as = (cmd: string, args: string[]) =>
    root ? run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args]) : run(join(bin, cmd), args);
  await as('initdb', ['-D', data, '-A', 'trust', '-U', 'tensorgate', '-E', 'UTF8', '--no-sync']);
  const port = await freePort();
  const options = `-p ${port} -k ${home} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off`;
  const start = async () => {
    await as('pg_ctl', ['-D', data, '-o', options, '-l', join(home, 'log'), '-w', '-t', '30', 'start']);
  };
  const stop = async () => {
    await as('pg_ctl', ['-D', data, '-m', 'fast', '-w', '-t', '30', 'stop']);
  };
  await start();
  return {
    url: `postgres://tensorgate:${password}@127.0.0.1:${port}/postgres`,
    port,
    start,
    stop,
    destroy: async () => {
      await stop().catch(() => {});
      rmSync(home, { recursive: true, force: true });
    },
  };
}
