#!/usr/bin/env node
// Runs the compiled CLI (npm run build). From a checkout without a build, build first: npm run build.
//
// tensorgate needs Node >= 22.15. Where the machine's Node is older, scripts/setup.sh installs one
// into .tensorgate/node and builds the native addons for it; this file then starts the CLI on that
// Node, whichever `node` ran it (an MCP client's config says "node"), passing stdio and signals.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const entry = new URL('../dist/cli/main.js', import.meta.url);
const nodeRoot = fileURLToPath(new URL('../.tensorgate/node/node_modules/node/node_modules/', import.meta.url));
const projectNode = existsSync(nodeRoot)
  ? readdirSync(nodeRoot)
      .filter((name) => name.startsWith('node-'))
      .map((name) => `${nodeRoot}${name}/bin/node`)
      .find((path) => existsSync(path))
  : undefined;

if (projectNode && realpathSync(projectNode) !== realpathSync(process.execPath)) {
  const child = spawn(projectNode, [...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: 'inherit',
  });
  // Ctrl-C in a terminal reaches the whole process group, the child included: passing it on
  // would make it a second one, which stops a server at once instead of gracefully.
  const forwarded = process.stdin.isTTY ? ['SIGTERM', 'SIGHUP'] : ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'])
    process.on(signal, () => forwarded.includes(signal) && child.kill(signal));
  child.on('exit', (code, signal) => {
    if (code !== null) process.exit(code);
    process.removeAllListeners(signal);
    process.kill(process.pid, signal); // end the way the child ended
  });
} else {
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (major < 22 || (major === 22 && minor < 15)) {
    process.stderr.write(
      `tensorgate: Node ${process.versions.node} is too old; it needs 22.15 or newer (22 or 24 LTS). ` +
        'scripts/setup.sh installs one into the checkout.\n',
    );
    process.exit(1);
  }
  if (!existsSync(entry)) {
    process.stderr.write('tensorgate: not built yet; run `npm run build` (or scripts/setup.sh) in the checkout\n');
    process.exit(1);
  }
  await import(entry.href);
}
