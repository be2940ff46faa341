#!/usr/bin/env bash
# Installs the peers of bench/peers (bench/peers/requirements.txt: the official MCP Python SDK,
# LitServe, KServe, Ray Serve) into .tensorgate/peers, a virtual environment over tensorgate's
# runtime so they use the same torch. Never part of tensorgate's runtime. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
install_venv "$PWD/.tensorgate/peers" bench/peers/requirements.txt --over-runtime
.tensorgate/peers/bin/python - <<'PY'
import kserve, litserve, mcp, numpy, ray, torch
from mcp.server.fastmcp import FastMCP
from ray import serve
torch.from_numpy(numpy.ones(1))
print(f"peers installed: mcp, litserve {litserve.__version__}, kserve, ray {ray.__version__}, torch {torch.__version__}")
PY
