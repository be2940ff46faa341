#!/usr/bin/env bash
# Installs the third-party MCP checkers that test/e2e/third-party.test.ts runs into .tensorgate/tools
# (git-ignored), apart from the project's own node_modules:
#   @modelcontextprotocol/conformance  server scenarios against `serve --http`; needs Node >= 22,
#   node (npm package)                 a Node 22 binary for it, at .tensorgate/tools/node_modules/node/bin/node
#   @modelcontextprotocol/inspector    `mcp-inspector --cli` against `serve --stdio` (runs on Node 20)
# The versions, and those of every dependency, are pinned by scripts/test-tools/package.json and
# package-lock.json; to move a pin, edit package.json there and run
#   npm install --package-lock-only --ignore-scripts --prefix scripts/test-tools
# Idempotent: does nothing when the pinned versions are already installed. Called by
# scripts/setup.sh --test (and so by scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

SRC=scripts/test-tools
DEST=.tensorgate/tools

# Prints what is missing or at the wrong version; prints nothing when the install is complete.
check() {
  node - "$SRC" "$DEST" <<'EOF'
const { readFileSync, existsSync } = require('node:fs');
const { execFileSync } = require('node:child_process');
const { join } = require('node:path');
const [src, dest] = process.argv.slice(2);
const read = (p) => readFileSync(p, 'utf8');
const problems = [];
for (const f of ['package.json', 'package-lock.json']) {
  if (!existsSync(join(dest, f)) || read(join(dest, f)) !== read(join(src, f))) problems.push(`${f} differs from ${src}`);
}
const pins = JSON.parse(read(join(src, 'package.json'))).dependencies;
for (const [name, version] of Object.entries(pins)) {
  const pkg = join(dest, 'node_modules', name, 'package.json');
  const have = existsSync(pkg) ? JSON.parse(read(pkg)).version : 'none';
  if (have !== version) problems.push(`${name}: want ${version}, have ${have}`);
}
try {
  const v = execFileSync(join(dest, 'node_modules/node/bin/node'), ['--version'], { encoding: 'utf8' }).trim();
  if (v !== `v${pins.node}`) problems.push(`node binary: want v${pins.node}, have ${v}`);
} catch {
  problems.push('node binary: missing or does not run');
}
if (problems.length) console.log(problems.join('\n'));
EOF
}

problems=$(check)
if [[ -z "$problems" ]]; then
  echo "test tools already installed in $DEST"
  exit 0
fi
echo "installing test tools into $DEST:"
echo "$problems" | sed 's/^/  /'

mkdir -p "$DEST"
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
# The inspector declares node >= 22.7.5 but its CLI mode runs on Node 20 (checked by the tests):
# keep npm's engine check a warning.
(cd "$DEST" && npm ci --no-audit --no-fund --engine-strict=false --loglevel=error)

# The `node` package fetches its binary in a preinstall script; npm versions that hold back
# dependencies' install scripts skip it, so run it here when the binary is missing.
if ! "$DEST/node_modules/node/bin/node" --version >/dev/null 2>&1; then
  (cd "$DEST/node_modules/node" && node installArchSpecificPackage.js)
fi

problems=$(check)
if [[ -n "$problems" ]]; then
  echo "test tools install incomplete:" >&2
  echo "$problems" | sed 's/^/  /' >&2
  exit 1
fi
echo "test tools installed: conformance $("$DEST/node_modules/node/bin/node" -p "require('./$DEST/node_modules/@modelcontextprotocol/conformance/package.json').version"), inspector $(node -p "require('./$DEST/node_modules/@modelcontextprotocol/inspector/package.json').version"), node $("$DEST/node_modules/node/bin/node" --version)"
