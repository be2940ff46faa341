#!/usr/bin/env bash
# The GPU checks of one device call, in order of cost, each allowed to fail without losing the
# others' results (everything lands under $OUT):
#   1. bench/gpu/check.py: formats and variants served on CUDA (needs the packed Node + checkout);
#   2. bench/gpu/serving.py: a call's cost over the raw forward at concurrency 1, and rows per
#      second against the raw batched forward at concurrency 32 (needs the packed Node too);
#   3. bench/training/gpu.py: what steering costs a launch-bound training loop (Python only);
#      against .devkit/train_before.py too when that file is there (an earlier SDK to compare);
#   4. the worker's CUDA tests (pytest -k cuda: page-locked arenas, queued copies, one wait per
#      request, its stage times), which skip on a machine without CUDA (Python only; pytest,
#      onnx and numpy are on the device's python3).
# Pack first, on the build machine (after scripts/setup.sh):
#   bash ../shared/tools/device-pack.sh     # .devkit/node.xz and .devkit/checkout.tar.xz
# then run on the device with carry [".devkit"]:
#   bash bench/gpu/device.sh [check|serving|training|tests|all, or a comma list: tests,serving]
# A device call runs at most 600 s and each start costs about a minute of the device budget:
# group parts into calls under that limit (check about 5 minutes, serving about 4, training and
# tests about 2 each; tests,serving then check is two calls); `all` is for a machine without it.
set -uo pipefail
what=",${1:-all},"
[[ $what == *,all,* ]] && what=",check,serving,training,tests,"
wants() { [[ $what == *,$1,* ]]; }
OUT=${OUT:-$PWD/bench/results}
mkdir -p "$OUT"
here=$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'

if wants check || wants serving; then
  mkdir -p /tmp/node/bin && xz -dc .devkit/node.xz > /tmp/node/bin/node && chmod +x /tmp/node/bin/node
  export PATH=/tmp/node/bin:$PATH
  rm -rf /tmp/tg && mkdir -p /tmp/tg && tar -xJf .devkit/checkout.tar.xz -C /tmp/tg
fi

if wants check; then
  cd /tmp/tg && timeout 330 python3 bench/gpu/check.py --out "$OUT" 2>&1 | tee "$OUT/gpu-check.log"
  cd "$here"
fi

if wants serving; then
  cd /tmp/tg && timeout 420 python3 bench/gpu/serving.py --out "$OUT" 2>&1 | tee "$OUT/gpu-serving.log"
  cd "$here"
fi

if wants training; then
  before=()
  [[ -f .devkit/train_before.py ]] && before=(--before .devkit/train_before.py)
  timeout 200 python3 bench/training/gpu.py --out "$OUT" "${before[@]}" 2>&1 | tee "$OUT/training-gpu.log"
fi

if wants tests; then
  PYTHONPATH=python timeout 200 python3 -m pytest -q -p no:logging -p no:cacheprovider -k cuda \
    python/tests 2>&1 | tee "$OUT/cuda-tests.log"
fi

ls -la "$OUT"
