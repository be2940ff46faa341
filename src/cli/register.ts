import { type GlobalOptions, openGateway } from './common.js';

export async function runRegister(global: GlobalOptions, dir: string): Promise<void> {
  const gateway = openGateway(global);
  try {
    const info = await gateway.register(dir);
    for (const v of info.versions) {
      const detail = v.state === 'ready' ? `load ${v.load_ms} ms, warm-up ${v.warmup_ms} ms on ${v.device}` : v.error;
      process.stdout.write(`${info.name}@${v.version}: ${v.state} (${detail})\n`);
    }
    if (info.versions.some((v) => v.state !== 'ready')) process.exitCode = 1;
  } finally {
    await gateway.close();
  }
}
