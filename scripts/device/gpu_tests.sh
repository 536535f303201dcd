#!/usr/bin/env bash
# Run ON the GPU machine from the repo root, after scripts/device/pack.sh here and a
# device call with carry: [".gpurun"]. Runs the GPU tests; logs and gtest JSON go to $OUT.
set -uo pipefail
: "${OUT:?run this on the device machine, where OUT is set}"
export LD_LIBRARY_PATH="$PWD/.gpurun/lib:${LD_LIBRARY_PATH:-}"
export TF_TEST_DATA_DIR="$PWD/tests/data"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
rc=0
.gpurun/cuda_kernel_tests --gtest_output="json:$OUT/cuda_kernel_tests.json" 2>&1 | tee "$OUT/cuda_kernel_tests.log" | tail -n 20
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
# NCCL communicator checks at one rank (more ranks need a multi-GPU machine).
timeout 120 .gpurun/comm_nccl_check --world 1 2>&1 | tee "$OUT/comm_nccl_check.log" | tail -n 5
[[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
exit $rc
