#!/usr/bin/env bash
# Run HERE before a GPU-machine call: builds the CUDA configuration (build-cuda/)
# and copies the shared libraries its binaries need that the GPU machine lacks
# (Debian's spdlog, fmt, gloo, ...) into .devlibs/ (git-ignored). Then call the
# device with carry: ["build-cuda", ".devlibs"] and run scripts/device/gpu_tests.sh.
# Binaries built here run there (this glibc is older than the GPU machine's).
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.devlibs/' .git/info/exclude 2>/dev/null || echo '/.devlibs/' >> .git/info/exclude
TF_CUDA=ON scripts/build.sh build-cuda -DTF_WERROR=ON "$@"
rm -rf .devlibs && mkdir -p .devlibs
# Everything a test/bench binary links that is not glibc, the C++ runtime or CUDA's driver.
for bin in build-cuda/tests/*/*_tests build-cuda/apps/tensorfold; do
  [[ -x "$bin" ]] || continue
  ldd "$bin" | awk '/=> \//{print $3}'
done | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux)[.-]|libcuda\.so' |
  while read -r lib; do cp -L "$lib" .devlibs/; done
du -sh .devlibs build-cuda
