import { defaultVersion } from '../registry/model-config.js';
import { Registry } from '../registry/registry.js';
import { configFrom, type GlobalOptions } from './common.js';

/** Reads the registry only: no workers are started. */
export async function runModels(global: GlobalOptions, opts: { json?: boolean }): Promise<void> {
  const config = configFrom(global);
  const registry = await Registry.open(config.registry, { replica: config.replicaId });
  try {
    const models = registry.list();
    if (opts.json) {
      process.stdout.write(`${JSON.stringify(models, null, 2)}\n`);
      return;
    }
    if (models.length === 0) {
      process.stdout.write('No models registered. Run `tensorgate register DIR` or `tensorgate serve`.\n');
      return;
    }
    for (const m of models) {
      const versions = m.versions
        .map((v) => `v${v.version}${v.version === defaultVersion(m.config) ? '*' : ''} ${v.status}`)
        .join(', ');
      process.stdout.write(`${m.name.padEnd(24)} ${versions.padEnd(30)} ${m.config.description}\n`);
    }
  } finally {
    await registry.close();
  }
}
