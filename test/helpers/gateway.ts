import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { defaultConfig, type GatewayConfig } from '../../src/config.js';
import { Gateway } from '../../src/gateway.js';

/**
 * An in-process gateway over an empty repository in `work` (its registry there too), for tests
 * that register the models they need; `config` overrides the defaults.
 */
export function openGateway(
  work: string,
  config: Partial<GatewayConfig> = {},
  log?: Parameters<typeof Gateway.open>[1],
): Promise<Gateway> {
  return Gateway.open(
    { ...defaultConfig(work), registry: join(work, 'r.db'), modelsDir: join(work, 'none'), ...config },
    log,
  );
}

/**
 * A copy of the fixture model `models/fixture` in `work/name`, served under `name`, with `edit`
 * applied to its config.json (a batching section, a queue size); returns its folder.
 */
export function modelCopy(
  models: string,
  fixture: string,
  work: string,
  name: string,
  edit: (config: Record<string, unknown>) => void = () => {},
): string {
  const dir = join(work, name);
  cpSync(join(models, fixture), dir, { recursive: true });
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  config.name = name;
  edit(config);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  return dir;
}
