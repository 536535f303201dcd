#!/usr/bin/env bash
# Starts tensorfold: prepares (dependencies, build) and runs the server.
# Extra arguments are passed to `tensorfold serve` after the configured defaults.
set -euo pipefail
cd "$(dirname "$0")"
scripts/deps.sh
cmake -S . -B build -G Ninja -DTF_CUDA="${TF_CUDA:-AUTO}" >/dev/null
cmake --build build -j "$(nproc)" --target tensorfold
# Serving arrives with the serving issue; until then show what the binary offers.
exec build/apps/tensorfold --help
