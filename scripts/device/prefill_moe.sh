#!/usr/bin/env bash
# Run ON the GPU machine (gpu_tests.sh part "prefillmoe"): where an EXL3 prompt's prefill goes.
# A synthetic full-width checkpoint of PF_LAYERS (8) layers x PF_EXPERTS (288, the release's count)
# EXL3 K=4 mcg experts + DENSE=q4 in /dev/shm; one op profile of prefill-8k (TF_PROFILE_OPS=1),
# then prefill-8k under each "label|ENV=.. ENV=..|bench args" line of PF_RUNS (one binary, side by side).
set -uo pipefail
: "${OUT:?run this on the device machine, where OUT is set}"
ck=/dev/shm/tf-exl3-prefill
rm -rf "$ck"
if ! timeout 300 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --layers "${PF_LAYERS:-8}" \
    --experts "${PF_EXPERTS:-288}" --exl3 --bits 4 --codebook mcg --mtp-layers 0 > "$OUT/prefill_synth.log" 2>&1; then
  echo "prefillmoe: synth-checkpoint failed"; tail -n 5 "$OUT/prefill_synth.log"; exit 1
fi
bench() {  # label, env assignments (space-separated, may be empty), extra bench args
  local label=$1 envs=$2 args=$3 log
  log="$OUT/prefill_$(echo "$label" | tr -c 'a-zA-Z0-9\n' '_').log"
  # shellcheck disable=SC2086
  env $envs TF_CACHE_DIR="$(mktemp -d)" timeout 240 .gpurun/tensorfold bench --offline --device cuda \
    --model-dir "$ck" --scenario "${PF_SCENARIO:-prefill-8k}" --timeout 200 $args > "$log" 2>&1
  echo "== $label ($envs $args): rc=$?"
  grep -E '^\[op-profile\]|prefill|TTFT|error' "$log" | head -n "${PF_LINES:-12}"
}
# PF_NCU=<kernel regex>: Nsight Compute on one launch of the matching kernel (after PF_NCU_SKIP
# launches): the full section set as text, then the SASS lines with the most warp-stall samples.
if [[ -n "${PF_NCU:-}" ]]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [[ -z "$ncu_bin" ]]; then
    echo "prefillmoe: no ncu on this machine"
  else
    run_ncu() {  # extra ncu args..., then the bench runs under it
      env ${PF_NCU_ENV:-} TF_CACHE_DIR="$(mktemp -d)" timeout 300 "$ncu_bin" --kernel-name "regex:$PF_NCU" \
        --launch-skip "${PF_NCU_SKIP:-4}" --launch-count 1 "$@" .gpurun/tensorfold bench --offline --device cuda \
        --model-dir "$ck" --scenario "${PF_SCENARIO:-prefill-8k}" --timeout 250
    }
    run_ncu --set full > "$OUT/prefill_ncu.txt" 2>&1
    echo "== ncu ($PF_NCU): rc=$?"
    grep -E 'Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Issued Warp|Eligible Warps|Stall|Memory Throughput|Compute \(SM\)|L1/TEX Hit|L2 Hit|Block Limit|Theoretical Occ|Executed Ipc|Pipe' \
      "$OUT/prefill_ncu.txt" | head -n 60
    run_ncu --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
      > "$OUT/prefill_ncu_sass.csv" 2>&1
    python3 scripts/device/ncu_top_stalls.py "$OUT/prefill_ncu_sass.csv" 45 || true
  fi
fi
if [[ -n "${PF_PROFILE:-1}" && "${PF_PROFILE:-1}" != 0 ]]; then
  PF_LINES=60 bench profile "TF_PROFILE_OPS=1 TF_PROFILE_OPS_EVERY=4" ""
fi
while IFS= read -r line; do
  [[ -z "$line" ]] && continue
  IFS='|' read -r label envs args <<< "$line"
  bench "$label" "$envs" "$args"
done <<< "${PF_RUNS:-default||}"
rm -rf "$ck"
