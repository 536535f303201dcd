#!/usr/bin/env bash
# Run ON the GPU machine from the repo root, after scripts/device/pack.sh here and a
# device call with carry: [".gpurun"]. Runs the GPU tests; logs and gtest JSON go to $OUT.
# TF_GPU_ONLY="kernels parity model nccl bench roofline serve" (any subset) runs only those parts;
# "benchgpu" (scripts/device/bench_gpu.sh, minutes) runs only when named.
set -uo pipefail
: "${OUT:?run this on the device machine, where OUT is set}"
export LD_LIBRARY_PATH="$PWD/.gpurun/lib:${LD_LIBRARY_PATH:-}"
# cuBLAS is not carried: take the GPU machine's (its CUDA toolkit, else the pip wheel).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; [print(os.path.join(p, s, "lib")) for p in nvidia.__path__ for s in os.listdir(p)]' 2>/dev/null); do
  ls "$d"/libcublasLt.so.* >/dev/null 2>&1 && { export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; break; }
done
export TF_TEST_DATA_DIR="$PWD/tests/data"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
rc=0
want() { [[ -z "${TF_GPU_ONLY:-}" || " $TF_GPU_ONLY " == *" $1 "* ]]; }
if want kernels; then
  .gpurun/cuda_kernel_tests --gtest_output="json:$OUT/cuda_kernel_tests.json" 2>&1 | tee "$OUT/cuda_kernel_tests.log" | tail -n 20
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
# Every op on CPU and CUDA (kernels/cuda vs kernels/cpu); "[parity]" lines give each op's error.
if want parity; then
  .gpurun/cuda_ops_parity_tests --gtest_output="json:$OUT/cuda_ops_parity_tests.json" > "$OUT/cuda_ops_parity_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[  (FAILED|PASSED) |^\[==========\]' "$OUT/cuda_ops_parity_tests.log" | tail -n 30
fi
# The model on CUDA vs the CPU backend and the transformers fixtures; "[cuda-parity]" lines give the deviations
# (log only: $OUT brings back at most 8 files).
if want model && [[ -x .gpurun/glm5_cuda_tests ]]; then
  timeout 300 .gpurun/glm5_cuda_tests > "$OUT/glm5_cuda_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[cuda-(parity|timing)\]|^\[  FAILED |^\[==========\]|^\[  PASSED ' "$OUT/glm5_cuda_tests.log" | tail -n 60
fi
# NCCL communicator checks at one rank (more ranks need a multi-GPU machine).
if want nccl; then
  timeout 120 .gpurun/comm_nccl_check --world 1 2>&1 | tee "$OUT/comm_nccl_check.log" | tail -n 5
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
# CUDA op timings at model shapes beside the HBM roofline (informative; does not change rc).
# Its "measured ..." lines (HBM copy bandwidth, cuBLAS bf16 peak) are echoed; tables and JSON lines stay in the log.
if want bench && [[ -x .gpurun/cuda_ops_bench ]]; then
  timeout 300 .gpurun/cuda_ops_bench > "$OUT/cuda_ops_bench.log" 2>&1
  grep -E '^measured' "$OUT/cuda_ops_bench.log"
fi
# `tensorfold bench --offline --device cuda` on the demo checkpoint: --probe (HBM copy, cuBLAS BF16),
# scenarios and the roofline columns end to end (tiny model: launch-bound, far below its roofline).
if want roofline && [[ -x .gpurun/tensorfold ]]; then
  echo "== bench --offline --device cuda --probe (demo checkpoint)"
  TF_CACHE_DIR="$(mktemp -d)" timeout 300 .gpurun/tensorfold bench --offline --device cuda --probe \
    --scenario decode-1,decode-4,prefill-1k --output-tokens 16 --kv f32 --memory-reserve-gib 0 2>&1 |
    grep -E '^(== scenario|bench: (probe|roofline)|  figure|  (decode|aggregate|prefill) tok/s|  decode,|  prefill of|concurrency|error|scenario .* FAILED)'
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
# The synthetic full-geometry benchmark (minutes; only when named: TF_GPU_ONLY="benchgpu").
if [[ " ${TF_GPU_ONLY:-} " == *" benchgpu "* ]]; then
  scripts/device/bench_gpu.sh || rc=1
fi
# The real server on the demo checkpoint: --device cuda vs cpu, then `tensorfold bench` over HTTP.
if want serve && [[ -x .gpurun/tensorfold ]]; then
  timeout 400 scripts/device/serve_check.sh > "$OUT/serve_check.log" 2>&1 || rc=1
  tail -n 60 "$OUT/serve_check.log"
fi
exit $rc
