#!/usr/bin/env bash
# Installs the peers of bench/peers (bench/peers/requirements.txt: the official MCP Python SDK,
# LitServe, KServe, Ray Serve) into .tensorgate/peers, a virtual environment over the system
# Python so they use Debian's torch. Never part of tensorgate's runtime. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.tensorgate/peers
PYTHON="${TENSORGATE_PYTHON:-/usr/bin/python3}"
STAMP="$VENV/.requirements"
if [[ -x $VENV/bin/python ]] && cmp -s bench/peers/requirements.txt "$STAMP"; then
  echo "peers already installed in $VENV"
  exit 0
fi
rm -rf "$VENV"
"$PYTHON" -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r bench/peers/requirements.txt
"$VENV/bin/python" - <<'PY'
import kserve, litserve, mcp, numpy, ray, torch
from mcp.server.fastmcp import FastMCP
from ray import serve
torch.from_numpy(numpy.ones(1))
print(f"peers installed: mcp, litserve {litserve.__version__}, kserve, ray {ray.__version__}, torch {torch.__version__}")
PY
cp bench/peers/requirements.txt "$STAMP"
