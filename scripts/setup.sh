#!/usr/bin/env bash
# Sets up a checkout on a fresh Debian 12 machine: PyTorch for the system Python, the Node
# packages, the compiled CLI, and the demo models. Idempotent: steps already done are skipped.
#   scripts/setup.sh          what serving needs
#   scripts/setup.sh --test   also what the tests need (pytest, ruff, Chromium, PostgreSQL, the
#                             third-party MCP checkers, tritonclient in its own venv, Helm and
#                             hadolint for the deployment files)
#   scripts/setup.sh --bench  also what bench/peers needs (Chromium for its plot, the peers in
#                             their own venv: bench/peers/setup-peers.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_bench=0
[[ "${1:-}" == "--test" ]] && want_test=1
[[ "${1:-}" == "--bench" ]] && want_bench=1
PYTHON="${TENSORGATE_PYTHON:-/usr/bin/python3}"
step() { printf '\n==> %s\n' "$*"; }

apt_packages=()
# Debian's python3-torch (1.13, CPU) installs in about 90 s; PyPI's torch wheels pull several GB
# of CUDA libraries on Linux, and the CPU-only wheels live on an index outside the registries.
"$PYTHON" -c 'import torch, numpy' 2>/dev/null || apt_packages+=(python3-torch python3-numpy)
# Workers decrypt models encrypted at rest with AES-GCM from the cryptography package.
"$PYTHON" -c 'import cryptography' 2>/dev/null || apt_packages+=(python3-cryptography)
if [[ $want_test == 1 ]]; then
  "$PYTHON" -c 'import pytest' 2>/dev/null || apt_packages+=(python3-pytest)
  # The shared-registry tests start a throwaway PostgreSQL server on loopback.
  compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || apt_packages+=(postgresql)
fi
if [[ $want_test == 1 || $want_bench == 1 ]]; then
  # The dashboard test drives a real headless browser (playwright-core with Debian's Chromium);
  # bench/peers draws its plot with it.
  [[ -x /usr/bin/chromium ]] || apt_packages+=(chromium)
fi
if ((${#apt_packages[@]})); then
  step "installing ${apt_packages[*]} with apt-get"
  SUDO=""
  [[ $(id -u) != 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi
echo "using torch $("$PYTHON" -c 'import torch; print(torch.__version__)') with $("$PYTHON" -V 2>&1) ($PYTHON)"

step "installing Node packages"
if [[ ! -d node_modules ]] || [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
  # onnxruntime-node ships its CPU library in the package; its install script would otherwise
  # fetch CUDA providers from outside the package registries.
  ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund
fi

step "building the CLI"
npm run --silent build

step "building the shared-memory mmap addon"
# Optional: without it the gateway moves tensor bytes into /dev/shm with positioned fs writes.
npm run --silent build:native >/dev/null 2>&1 ||
  echo "mmap addon not built (needs g++, make, python3): arenas fall back to fs writes"

if [[ ! -f models/image-classifier/config.json || ! -f models/tabular-classifier/config.json ]]; then
  step "building the demo models into models/"
  "$PYTHON" scripts/make_demo_models.py models
fi

if [[ $want_test == 1 ]]; then
  step "installing test tools"
  python3 -m ruff --version 2>/dev/null | grep -q "0.17.6" || python3 -m pip install --quiet ruff==0.17.6
  bash scripts/install-test-tools.sh
  bash scripts/install-python-clients.sh
  # Helm, hadolint and the manifest validator that test/deploy checks the deployment files with.
  bash scripts/check-deploy.sh --install-only
fi
if [[ $want_bench == 1 ]]; then
  step "installing the peers of bench/peers"
  bash bench/peers/setup-peers.sh
fi
step "set-up done"
