#!/usr/bin/env bash
# Installs the third-party Python programs the tests drive tensorgate with or against, each in a
# virtual environment of its own (git-ignored), apart from tensorgate's runtime:
#   .tensorgate/pyclients  Triton's tritonclient (HTTP and gRPC) and prometheus-client, pinned by
#                          scripts/test-tools/python-clients.txt (test/e2e/oip.test.ts and others)
#   .tensorgate/kserve     the KServe model server over the system Python and its torch, pinned by
#                          scripts/test-tools/kserve.txt (test/e2e/remote-kserve.test.ts, bench/remote)
# Idempotent: an environment is rebuilt only when its pins changed. Called by scripts/setup.sh --test.
set -euo pipefail
cd "$(dirname "$0")/.."

# install VENV REQUIREMENTS PYTHON [venv options...]
install() {
  local venv=$1 requirements=$2 python=$3
  shift 3
  if [[ -x $venv/bin/python ]] && cmp -s "$requirements" "$venv/installed-requirements.txt"; then
    echo "$(basename "$venv") already installed in $venv"
    return
  fi
  rm -rf "$venv"
  "$python" -m venv "$@" "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/installed-requirements.txt"
}

install .tensorgate/pyclients scripts/test-tools/python-clients.txt python3
echo "python clients in .tensorgate/pyclients: tritonclient $(.tensorgate/pyclients/bin/python -c 'from importlib.metadata import version; print(version("tritonclient"))')"

install .tensorgate/kserve scripts/test-tools/kserve.txt "${TENSORGATE_PYTHON:-/usr/bin/python3}" --system-site-packages
echo "KServe in .tensorgate/kserve: kserve $(.tensorgate/kserve/bin/python -c 'from importlib.metadata import version; print(version("kserve"))' 2>/dev/null)"
