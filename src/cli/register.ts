import { basename, resolve } from 'node:path';
import { type GlobalOptions, openGateway, stderrLogger } from './common.js';
import { watchLoading } from './load-progress.js';
import { Progress } from './progress.js';

export async function runRegister(global: GlobalOptions, dir: string): Promise<void> {
  const progress = new Progress({ label: `registering ${basename(resolve(dir))}` });
  const gateway = openGateway(global, {}, progress.wrap(stderrLogger));
  const unwatch = watchLoading(gateway, progress);
  try {
    const info = await gateway
      .register(dir, `cli:${process.env.USER ?? process.getuid?.() ?? 'unknown'}`)
      .finally(() => {
        unwatch();
        progress.stop();
      });
    for (const v of info.versions) {
      const detail = v.state === 'ready' ? `load ${v.load_ms} ms, warm-up ${v.warmup_ms} ms on ${v.device}` : v.error;
      process.stdout.write(`${info.name}@${v.version}: ${v.state} (${detail})\n`);
    }
    if (info.versions.some((v) => v.state !== 'ready')) process.exitCode = 1;
  } finally {
    await gateway.close();
  }
}
