#!/usr/bin/env bash
# bench/peers in one command on a fresh machine: sets up tensorgate and the peers (each in its own
# environment), measures every system (bench/peers/run.ts; arguments are passed on), draws the
# plot and rewrites docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/setup.sh --bench
# The Node setup.sh installed (the project's LTS), as the README's commands run it.
source scripts/lib.sh
use_project_node
node --import tsx bench/peers/run.ts "$@"
node --import tsx bench/report.ts
