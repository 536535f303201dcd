#!/usr/bin/env bash
# Run ON the GPU machine from the repo root, after scripts/device/pack.sh here and
# a call with carry: ["build-cuda", ".devlibs"]. Runs every GPU-labelled test
# binary, writes logs and gtest JSON under $OUT.
set -uo pipefail
: "${OUT:?run this on the device machine, where OUT is set}"
export LD_LIBRARY_PATH="$PWD/.devlibs:${LD_LIBRARY_PATH:-}"
export TF_TEST_DATA_DIR="$PWD/tests/data"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
rc=0
for bin in build-cuda/tests/kernels/*_tests; do
  name=$(basename "$bin")
  echo "== $name"
  "$bin" --gtest_output="json:$OUT/$name.json" 2>&1 | tee "$OUT/$name.log" | tail -n 25
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
done
exit $rc
