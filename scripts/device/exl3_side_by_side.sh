#!/usr/bin/env bash
# EXL3 K=4 mcg GEMV at batch 1, tensorfold vs exllamav3's own kernel on the same shapes in the
# same GPU call (issue #8). Run ON the GPU machine from the repo root, after scripts/device/pack.sh
# here and a device call with carry [".gpurun", ".exl3ref"] (.exl3ref: exllamav3 headers, never
# committed; exl3_side_by_side.py says which). Log in $OUT/exl3_side_by_side.log when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
export LD_LIBRARY_PATH="$PWD/.gpurun/lib:${LD_LIBRARY_PATH:-}"
log="${OUT:-/tmp}/exl3_side_by_side.log"
timeout 300 python3 scripts/device/exl3_side_by_side.py > "$log" 2>&1
rc=$?
grep -E '^exl3-sbs|Error|error|FAILED|Traceback' "$log" | head -n 30
exit $rc
