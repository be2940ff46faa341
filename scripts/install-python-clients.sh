#!/usr/bin/env bash
# Installs the third-party Python clients that test/e2e/oip.test.ts runs (Triton's tritonclient,
# HTTP) into a virtual environment of their own, .tensorgate/pyclients (git-ignored), apart from
# tensorgate's runtime. Pinned by scripts/test-tools/python-clients.txt. Idempotent: does nothing
# when that file has not changed since the last install. Called by scripts/setup.sh --test.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUIREMENTS=scripts/test-tools/python-clients.txt
VENV=.tensorgate/pyclients

if [[ -x $VENV/bin/python ]] && cmp -s "$REQUIREMENTS" "$VENV/installed-requirements.txt"; then
  echo "python clients already installed in $VENV"
  exit 0
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
cp "$REQUIREMENTS" "$VENV/installed-requirements.txt"
echo "python clients installed in $VENV: tritonclient $("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("tritonclient"))')"
