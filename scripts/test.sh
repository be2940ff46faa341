#!/usr/bin/env bash
# Sets up everything the tests need, then runs every check: lint and types, the Python worker's
# tests (pytest) on the pinned torch and on the oldest torch tensorgate supports, and the
# TypeScript unit and end-to-end tests (node's test runner) with real PyTorch workers, real MCP
# clients over stdio and HTTP, and the third-party MCP checkers.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
step() { printf '\n==> %s\n' "$*"; }

bash scripts/setup.sh --test
use_project_node
PYTHON=$(runtime_python)
FLOOR="$TG_VENV-floor/bin/python"

step "lint: biome, tsc, ruff"
npx biome check .
npx tsc -p tsconfig.test.json
"$PYTHON" -m ruff check python scripts test bench examples
"$PYTHON" -m ruff format --check python scripts test bench examples

step "building the test models"
export TENSORGATE_TEST_MODELS="$PWD/.tensorgate/test-models"
"$PYTHON" scripts/make_demo_models.py "$TENSORGATE_TEST_MODELS" --skip pipeline --skip digits --skip intents --skip dtmf >/dev/null
# The digits model (image files in, labels out) in a repository of its own: test/helpers/models.ts.
"$PYTHON" scripts/make_demo_models.py "$TENSORGATE_TEST_MODELS-digits" --only digits >/dev/null
# The text and audio demo models (a sentence, a WAV file in), likewise.
"$PYTHON" scripts/make_demo_models.py "$TENSORGATE_TEST_MODELS-text-audio" --only intents --only dtmf >/dev/null
"$PYTHON" scripts/make_test_models.py "$TENSORGATE_TEST_MODELS" >/dev/null

# The two pytest runs go side by side: each keeps about one core busy (torch's forward passes and
# compiles in one process at a time), so together they take about the time of the longer one.
pytest_on() { # WHICH PYTHON
  step "python tests (pytest) on $1 $("$2" -c 'import torch; print(torch.__version__)')"
  PYTHONPATH=python "$2" -m pytest -q -p no:logging python/tests
}
side_by_side 'pytest_on torch "$PYTHON"' 'pytest_on "the oldest supported torch," "$FLOOR"'

step "TypeScript tests (node --test) on node $(node --version)"
mapfile -t files < <(find test -name '*.test.ts' | sort)
# Two test files at a time (node's default is one less than the cores: one, on 2 cores). Most of a
# suite's time is spent waiting on worker processes, compiles and servers, so two overlap well:
# the node phase went from about 27 to 18 minutes on 2 cores. TG_TEST_CONCURRENCY overrides.
node --import tsx --test --test-concurrency="${TG_TEST_CONCURRENCY:-2}" --test-reporter=spec "${files[@]}"
