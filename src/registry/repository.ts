import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { tgError } from '../errors.js';
import { type ModelConfig, parseModelConfig } from './model-config.js';

/** A model folder on disk: its validated config and the absolute paths of each version's files. */
export interface ModelSource {
  dir: string;
  config: ModelConfig;
}

export const CONFIG_FILE = 'config.json';

/** Reads and validates one model folder; every version's weight file must exist. */
export function readModelDir(dir: string): ModelSource {
  const abs = resolve(dir);
  const configPath = join(abs, CONFIG_FILE);
  if (!existsSync(configPath)) {
    throw tgError(
      'INVALID_CONFIG',
      `${abs} has no ${CONFIG_FILE}; a model folder holds config.json and version folders`,
      {
        dir: abs,
      },
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(configPath, 'utf8'));
  } catch (err) {
    throw tgError('INVALID_CONFIG', `${configPath} is not valid JSON: ${(err as Error).message}`, {
      source: configPath,
    });
  }
  const config = parseModelConfig(raw, configPath);
  for (const [version, v] of Object.entries(config.versions)) {
    if (v.format === 'remote') continue; // served elsewhere: nothing on disk
    const file = versionFile(abs, version, v.file);
    if (!existsSync(file)) {
      throw tgError('INVALID_CONFIG', `${configPath}: version ${version} names ${v.file}, but ${file} does not exist`, {
        source: configPath,
        version,
      });
    }
  }
  return { dir: abs, config };
}

export function versionDir(modelDir: string, version: string): string {
  return join(modelDir, version);
}

export function versionFile(modelDir: string, version: string, file: string): string {
  return join(modelDir, version, file);
}

/** Lists model folders (those holding a config.json) directly under a repository folder. */
export function scanRepository(root: string): string[] {
  const abs = resolve(root);
  if (!existsSync(abs) || !statSync(abs).isDirectory()) return [];
  return subfolders(abs).filter((dir) => existsSync(join(dir, CONFIG_FILE)));
}

/** The folders directly under `abs`, symbolic links to folders included (a repository of links is common). */
export function subfolders(abs: string): string[] {
  return readdirSync(abs, { withFileTypes: true })
    .filter(
      (e) =>
        e.isDirectory() ||
        (e.isSymbolicLink() && statSync(join(abs, e.name), { throwIfNoEntry: false })?.isDirectory()),
    )
    .map((e) => join(abs, e.name))
    .sort();
}
