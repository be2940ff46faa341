import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

/**
 * Starts a worker thread running `module`, a file beside the module at `from` (its
 * import.meta.url), named without its extension: the .js file once built, the .ts file when run
 * from source.
 */
export function startModuleThread(from: string, module: string, workerData: unknown, name: string): Worker {
  const file = new URL(`./${module}${extname(fileURLToPath(from))}`, from);
  if (file.pathname.endsWith('.js')) return new Worker(file, { workerData, name });
  // Run from source (the tests, through tsx): loader hooks do not reach worker threads, so the
  // thread registers tsx itself before importing its TypeScript module.
  const bootstrap = `import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(file.href)}); })`;
  return new Worker(bootstrap, { eval: true, workerData, name });
}
