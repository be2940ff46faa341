#!/usr/bin/env bash
# Sets up everything the tests need, then runs every check: lint and types, the Python worker's
# tests (pytest), and the TypeScript unit and end-to-end tests (node's test runner) with real
# PyTorch workers, real MCP clients over stdio and HTTP, and the third-party MCP checkers.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }
PYTHON="${TENSORGATE_PYTHON:-/usr/bin/python3}"

bash scripts/setup.sh --test

step "lint: biome, tsc, ruff"
npx biome check .
npx tsc -p tsconfig.test.json
python3 -m ruff check python scripts test bench examples
python3 -m ruff format --check python scripts test bench examples

step "building the test models"
export TENSORGATE_TEST_MODELS="$PWD/.tensorgate/test-models"
"$PYTHON" scripts/make_demo_models.py "$TENSORGATE_TEST_MODELS" --skip pipeline >/dev/null
"$PYTHON" scripts/make_test_models.py "$TENSORGATE_TEST_MODELS" >/dev/null

step "python tests (pytest)"
PYTHONPATH=python "$PYTHON" -m pytest -q python/tests

step "TypeScript tests (node --test)"
mapfile -t files < <(find test -name '*.test.ts' | sort)
node --import tsx --test --test-reporter=spec "${files[@]}"
