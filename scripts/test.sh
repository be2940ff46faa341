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
# compiles in one process at a time), so together they take about the time of the longer one. Each
# run's output is kept in a file and printed whole, in order, once both have ended.
pytest_logs=$(mktemp -d)
pytest_on() { # NAME PYTHON
  PYTHONPATH=python "$2" -m pytest -q -p no:logging python/tests >"$pytest_logs/$1.log" 2>&1
}
pytest_on pinned "$PYTHON" &
pinned=$!
pytest_on floor "$FLOOR" &
floor=$!
pinned_status=0 floor_status=0
wait "$pinned" || pinned_status=$?
wait "$floor" || floor_status=$?
step "python tests (pytest) on torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
cat "$pytest_logs/pinned.log"
step "python tests (pytest) on the oldest supported torch, $("$FLOOR" -c 'import torch; print(torch.__version__)')"
cat "$pytest_logs/floor.log"
rm -rf "$pytest_logs"
if ((pinned_status || floor_status)); then
  echo "pytest failed (exit status $pinned_status on the pinned torch, $floor_status on the oldest)" >&2
  exit 1
fi

step "TypeScript tests (node --test) on node $(node --version)"
mapfile -t files < <(find test -name '*.test.ts' | sort)
# Two test files at a time (node's default is one less than the cores: one, on 2 cores). Most of a
# suite's time is spent waiting on worker processes, compiles and servers, so two overlap well:
# the node phase went from about 27 to 18 minutes on 2 cores. TG_TEST_CONCURRENCY overrides.
node --import tsx --test --test-concurrency="${TG_TEST_CONCURRENCY:-2}" --test-reporter=spec "${files[@]}"
