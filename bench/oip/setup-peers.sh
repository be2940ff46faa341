#!/usr/bin/env bash
# Installs the KServe model server (PyPI kserve) for bench/oip into its own virtual environment,
# .tensorgate/peers-kserve, on top of the system Python that has Debian's torch (so it serves the
# same TorchScript files with the same torch). numpy stays below 2: torch 1.13 was built against
# numpy 1.x. Never part of tensorgate's runtime. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=.tensorgate/peers-kserve
PYTHON="${TENSORGATE_PYTHON:-/usr/bin/python3}"
if [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import kserve, torch' 2>/dev/null; then
  echo "kserve already installed in $VENV"
  exit 0
fi
rm -rf "$VENV"
"$PYTHON" -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "kserve==0.21.0" "numpy<2"
"$VENV/bin/python" -c 'import kserve, torch, numpy; torch.from_numpy(numpy.ones(1)); print("kserve installed in '"$VENV"'")'
