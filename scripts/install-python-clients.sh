#!/usr/bin/env bash
# Installs the third-party Python programs the tests drive tensorgate with or against, each in a
# virtual environment of its own (git-ignored), apart from tensorgate's runtime:
#   .tensorgate/pyclients  Triton's tritonclient (HTTP and gRPC), prometheus-client, the MCP
#                          Python SDK (its task client) and pyarrow, pinned by
#                          scripts/test-tools/python-clients.txt (test/e2e/oip.test.ts and others)
#   .tensorgate/kserve     the KServe model server, pinned by scripts/test-tools/kserve.txt, over
#                          the runtime's torch (test/e2e/remote-kserve.test.ts, bench/remote)
# Idempotent: an environment is rebuilt only when its pins changed. Called by scripts/setup.sh --test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

install_venv "$PWD/.tensorgate/pyclients" scripts/test-tools/python-clients.txt
echo "python clients in .tensorgate/pyclients: tritonclient $(.tensorgate/pyclients/bin/python -c 'from importlib.metadata import version; print(version("tritonclient"))')"

install_venv "$PWD/.tensorgate/kserve" scripts/test-tools/kserve.txt --over-runtime
echo "KServe in .tensorgate/kserve: kserve $(.tensorgate/kserve/bin/python -c 'from importlib.metadata import version; print(version("kserve"))' 2>/dev/null), torch $(.tensorgate/kserve/bin/python -c 'import torch; print(torch.__version__)')"
