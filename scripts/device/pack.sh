#!/usr/bin/env bash
# Run HERE before a GPU-machine call: builds the GPU test binaries in the CUDA
# configuration (build-cuda/, or $TF_BUILD_DIR) and copies them, with the shared libraries the GPU
# machine lacks (Debian's gloo & co., cudart), into .gpurun/ (git-ignored, ~11 MB).
# Then call the device with carry: [".gpurun"] and command
#   scripts/device/gpu_tests.sh
# (.gpurun/cuda_ops_bench, carried too, times the CUDA ops at model shapes.)
# Binaries built here run there (this glibc is older than the GPU machine's);
# NCCL (218 MB) and cuBLAS (600 MB) are too large to carry and are taken from the
# GPU machine's CUDA installation (gpu_tests.sh puts them on LD_LIBRARY_PATH).
# TF_BUILD_DIR picks the build directory (default build-cuda).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpurun/' .git/info/exclude 2>/dev/null || echo '/.gpurun/' >> .git/info/exclude
build="${TF_BUILD_DIR:-build-cuda}"
targets=(cuda_kernel_tests cuda_quant_tests cuda_quant_ring_tests cuda_fp8_gemm_tests cuda_ops_parity_tests comm_nccl_check cuda_ops_bench cuda_prefill_bench glm5_cuda_tests glm5_graphs_cuda_tests exl3_cuda_tests exl3_cuda_bench exl3_decode_rate_bench cuda_moe_tests cuda_moe_experts_bench cuda_mla_decode_bench cuda_smallops_bench cuda_pdl_bench cuda_matmul_many_tests cuda_kda_lowrank_bench cuda_l2_prefetch_bench cuda_kda_chain_bench spec_decode_bench tf_cupti_trace tensorfold)
cmake -S . -B "$build" -G Ninja -DTF_CUDA=ON -DTF_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
rm -rf .gpurun && mkdir -p .gpurun/lib
cp "$build"/tests/kernels/cuda_kernel_tests "$build"/tests/kernels/cuda_quant_tests "$build"/tests/kernels/cuda_quant_ring_tests "$build"/tests/kernels/cuda_fp8_gemm_tests "$build"/tests/kernels/cuda_ops_parity_tests \
   "$build"/tests/unit/comm_nccl_check "$build"/bench/cuda_ops_bench "$build"/bench/cuda_prefill_bench "$build"/tests/model/glm5_cuda_tests "$build"/tests/model/glm5_graphs_cuda_tests "$build"/apps/tensorfold \
   "$build"/tests/kernels/exl3_cuda_tests "$build"/bench/exl3_cuda_bench \
   "$build"/tests/kernels/cuda_moe_tests "$build"/bench/cuda_moe_experts_bench "$build"/bench/cuda_mla_decode_bench "$build"/bench/cuda_smallops_bench "$build"/bench/cuda_pdl_bench "$build"/tests/kernels/cuda_matmul_many_tests \
   "$build"/bench/cuda_kda_lowrank_bench "$build"/bench/cuda_l2_prefetch_bench "$build"/bench/cuda_kda_chain_bench \
   "$build"/bench/spec_decode_bench .gpurun/
# The kernel tracer (part `trace`) and the CUPTI it was built against, apart from lib/ (the machine's own
# CUDA libraries stay first for everything else).
if [[ -f "$build"/bench/libtf_cupti_trace.so ]]; then
  mkdir -p .gpurun/cupti
  cp "$build"/bench/libtf_cupti_trace.so .gpurun/
  cp -L "$(ldd "$build"/bench/libtf_cupti_trace.so | awk '/libcupti/{print $3}')" .gpurun/cupti/
fi
# Debug info would take the carried tree past its 64 MiB limit (symbols stay for backtraces).
find .gpurun -maxdepth 1 -type f -exec strip --strip-debug {} +
# TF_MEDIA_STUBS=1: stand-ins for the FFmpeg libraries (scripts/device/media_stubs.py) instead of their
# ~165 MB chain, for `tensorfold bench` runs that never decode media; resolved first below, so the real
# chain is not copied.
if [[ "${TF_MEDIA_STUBS:-0}" == 1 ]]; then python3 scripts/device/media_stubs.py .gpurun/tensorfold .gpurun/lib; fi
# (`|| continue`: a trailing `[[ -f lib ]]` must not fail the loop under pipefail.) libcurl stays the
# machine's own: on LD_LIBRARY_PATH, Debian 12's would shadow it for the machine's newer curl tool.
for b in .gpurun/*; do [[ -f "$b" ]] || continue; LD_LIBRARY_PATH="$PWD/.gpurun/lib" ldd "$b" | awk '/=> \//{print $3}'; done | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux)[.-]|libcuda\.so|libnccl|libcublas|libcurl|/\.gpurun/lib/' |
  while read -r lib; do cp -L "$lib" .gpurun/lib/; done
du -sh .gpurun
