#!/usr/bin/env bash
# Sets up a checkout on a fresh Debian 12 machine: a current Node when the machine's is older than
# 22.15, PyTorch 2.x in the project's virtual environment (.tensorgate/venv, pinned by
# python/requirements.txt), the Node packages, the compiled CLI, and the demo models. Idempotent:
# steps already done are skipped.
#   scripts/setup.sh          what serving needs
#   scripts/setup.sh --test   also what the tests need (pytest, ruff, Chromium, PostgreSQL, the
#                             third-party MCP checkers, tritonclient and KServe in venvs of their
#                             own, the oldest torch tensorgate supports for its Python tests, Helm
#                             and hadolint for the deployment files)
#   scripts/setup.sh --bench  also what bench/peers needs (Chromium for its plot, the peers in
#                             their own venv: bench/peers/setup-peers.sh)
# TENSORGATE_PYTHON=/path/to/python uses that interpreter (with its own torch >= 2.6) instead of
# the project's venv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

want_test=0
want_bench=0
[[ "${1:-}" == "--test" ]] && want_test=1
[[ "${1:-}" == "--bench" ]] && want_bench=1
step() { printf '\n==> %s\n' "$*"; }

apt_packages=()
python3 -m venv --help >/dev/null 2>&1 || apt_packages+=(python3-venv)
if [[ $want_test == 1 ]]; then
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

step "Node"
use_project_node
if ! node_is_current; then
  echo "node $(node --version 2>/dev/null || echo missing) is older than $TG_NODE_MIN: installing Node $TG_NODE_VERSION into .tensorgate/node"
  # The npm registry's `node` package: the official binary and headers of that release.
  npm install --prefix .tensorgate/node --no-audit --no-fund --loglevel=error "node@$TG_NODE_VERSION" >/dev/null
  if ! project_node_dir >/dev/null; then
    # npm versions that hold back dependencies' install scripts skip the one fetching the binary.
    (cd .tensorgate/node/node_modules/node && node installArchSpecificPackage.js)
  fi
  use_project_node
  # Packages built by another Node would not load in this one.
  rm -rf node_modules
fi
echo "using node $(node --version) ($(command -v node))"

step "PyTorch"
if [[ -n ${TENSORGATE_PYTHON:-} ]]; then
  echo "TENSORGATE_PYTHON is set: the workers run on $TENSORGATE_PYTHON"
else
  install_venv "$TG_VENV" python/requirements.txt
fi
PYTHON=$(runtime_python)
"$PYTHON" - <<'PY' || { echo "tensorgate needs torch >= 2.6 in $PYTHON" >&2; exit 1; }
import platform, sys, torch
major, minor = (int(p) for p in torch.__version__.split(".")[:2])
print(f"using torch {torch.__version__} with Python {platform.python_version()} ({sys.executable})")
sys.exit(0 if (major, minor) >= (2, 6) else 1)
PY

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

# Installs a requirements file's pins into the runtime unless they are there already.
install_pins() {
  if ! "$PYTHON" - "$1" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
pins = [l.split("==") for l in open(sys.argv[1]) if "==" in l and not l.startswith("#")]
try:
    sys.exit(0 if all(version(n) == v.strip() for n, v in pins) else 1)
except PackageNotFoundError:
    sys.exit(1)
PY
  then
    "$PYTHON" -m pip install --quiet --disable-pip-version-check -r "$1"
  fi
}

step "demo model tools"
install_pins python/requirements-demo.txt

if [[ ! -f models/image-classifier/config.json || ! -f models/image-classifier/1/model.pt2 ]]; then
  step "building the demo models into models/"
  "$PYTHON" scripts/make_demo_models.py models
else
  # A checkout set up before a demo existed gets it without rebuilding the rest.
  for part in digits:digits/examples/labels.json intents:intents/examples.json dtmf:dtmf/examples/labels.json; do
    if [[ ! -f models/${part#*:} ]]; then
      step "building the ${part%%:*} demo model into models/"
      "$PYTHON" scripts/make_demo_models.py models --only "${part%%:*}"
    fi
  done
fi

if [[ $want_test == 1 ]]; then
  step "installing test tools"
  # pytest, ruff, the reference safetensors and transformers, at python/requirements-test.txt's pins.
  install_pins python/requirements-test.txt
  # Side by side, as they wait on downloads and unpacking, each printed whole once it ends: the
  # oldest torch tensorgate supports, for the Python tests (another 5 GB, about a minute); the MCP
  # checkers, then Helm, hadolint and the manifest validator that test/deploy checks the
  # deployment files with (both in .tensorgate/tools); tritonclient and the KServe model server.
  side_by_side \
    'install_venv "$TG_VENV-floor" python/requirements-floor.txt' \
    'bash scripts/install-test-tools.sh && bash scripts/check-deploy.sh --install-only' \
    'bash scripts/install-python-clients.sh'
fi
if [[ $want_bench == 1 ]]; then
  step "installing the peers of bench/peers"
  bash bench/peers/setup-peers.sh
fi
step "set-up done"
