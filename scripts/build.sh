#!/usr/bin/env bash
# Configures and builds one configuration.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
# BUILD_DIR defaults to build/; TF_CUDA=OFF|ON|AUTO picks the backend (AUTO by default).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$dir" -G Ninja -DTF_CUDA="${TF_CUDA:-AUTO}" "$@"
cmake --build "$dir" -j "$jobs"
