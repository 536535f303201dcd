#!/usr/bin/env bash
# Run HERE before a GPU-machine call: builds the GPU test binaries in the CUDA
# configuration (build-cuda/) and copies them, with the shared libraries the GPU
# machine lacks (Debian's gloo & co., cudart), into .gpurun/ (git-ignored, ~11 MB).
# Then call the device with carry: [".gpurun"] and command
#   scripts/device/gpu_tests.sh
# Binaries built here run there (this glibc is older than the GPU machine's);
# NCCL (218 MB) is too large to carry and is taken from the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpurun/' .git/info/exclude 2>/dev/null || echo '/.gpurun/' >> .git/info/exclude
targets=(cuda_kernel_tests comm_nccl_check)
cmake -S . -B build-cuda -G Ninja -DTF_CUDA=ON -DTF_WERROR=ON "$@" >/dev/null
cmake --build build-cuda -j "$(nproc)" --target "${targets[@]}"
rm -rf .gpurun && mkdir -p .gpurun/lib
cp build-cuda/tests/kernels/cuda_kernel_tests build-cuda/tests/unit/comm_nccl_check .gpurun/
for b in .gpurun/*; do [[ -f "$b" ]] && ldd "$b" | awk '/=> \//{print $3}'; done | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux)[.-]|libcuda\.so|libnccl' |
  while read -r lib; do cp -L "$lib" .gpurun/lib/; done
du -sh .gpurun
