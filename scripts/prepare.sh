#!/usr/bin/env bash
# Prepares this machine to serve: system packages (apt-get), then the build of the
# tensorfold binary. `--rebuild` starts the build folder from scratch. With WORKER set,
# also every worker: its folder gets the binary, its libraries and the checkpoint
# (scripts/sync_workers.sh).
#   scripts/prepare.sh [--rebuild]
set -euo pipefail
source "$(dirname "$0")/config.sh"
rebuild=0
for a in "$@"; do
  case "$a" in
    --rebuild) rebuild=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) tf_fail "prepare.sh: unknown argument '$a'" ;;
  esac
done
cd "$TF_ROOT"
tf_workers
if ((${#TF_WORKERS[@]})); then scripts/deps.sh --worker; else scripts/deps.sh; fi
if ((rebuild)); then rm -rf "$BUILD_DIR"; fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DTF_CUDA="${TF_CUDA:-AUTO}" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target tensorfold
mkdir -p "$STATE_DIR"
echo "prepared: $BUILD_DIR/apps/tensorfold"
if ((${#TF_WORKERS[@]})); then scripts/sync_workers.sh; fi
