#!/usr/bin/env node
// Runs the compiled CLI (npm run build). From a checkout without a build, build first: npm run build.
import { existsSync } from 'node:fs';

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(entry)) {
  process.stderr.write('tensorgate: not built yet; run `npm run build` (or scripts/setup.sh) in the checkout\n');
  process.exit(1);
}
await import(entry.href);
