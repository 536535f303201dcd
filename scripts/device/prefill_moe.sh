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
if [[ -n "${PF_PROFILE:-1}" && "${PF_PROFILE:-1}" != 0 ]]; then
  PF_LINES=60 bench profile "TF_PROFILE_OPS=1 TF_PROFILE_OPS_EVERY=4" ""
fi
while IFS= read -r line; do
  [[ -z "$line" ]] && continue
  IFS='|' read -r label envs args <<< "$line"
  bench "$label" "$envs" "$args"
done <<< "${PF_RUNS:-default||}"
rm -rf "$ck"
