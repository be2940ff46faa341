import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { arch, cpus, loadavg, platform, release, totalmem } from 'node:os';
import { join } from 'node:path';

/** What a reader needs to compare figures between machines and commits. */
export interface MachineInfo {
  cpu_model: string;
  cores: number;
  memory_gib: number;
  os: string;
  node: string;
  python?: string;
  torch?: string;
  mcp_client: string;
  mcp_server: string;
  commit: string;
  load_average_1m: number;
}

function packageVersion(root: string, name: string): string {
  try {
    const pkg = JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as {
      version: string;
    };
    return pkg.version;
  } catch {
    return 'unknown';
  }
}

/** The checkout's commit, `+dirty` when its src or python has changes not committed. */
export function gitCommit(root: string): string {
  try {
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src', 'python'], {
      cwd: root,
      encoding: 'utf8',
    });
    return dirty.trim() ? `${sha}+dirty` : sha;
  } catch {
    return 'unknown';
  }
}

export function machineInfo(root: string, runtime: { python?: string; torch?: string } = {}): MachineInfo {
  const list = cpus();
  return {
    cpu_model: list[0]?.model.trim() ?? 'unknown',
    cores: list.length,
    memory_gib: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    os: `${platform()} ${release()} ${arch()}`,
    node: process.version,
    ...runtime,
    mcp_client: packageVersion(root, '@modelcontextprotocol/client'),
    mcp_server: packageVersion(root, '@modelcontextprotocol/server'),
    commit: gitCommit(root),
    load_average_1m: Math.round((loadavg()[0] ?? 0) * 100) / 100,
  };
}
