#!/usr/bin/env bash
# Run ON the GPU machine (from gpu_tests.sh, part `sampling`): `tensorfold serve --device cuda`
# on the demo checkpoint twice, sampling on the host (TF_DEVICE_SAMPLING=0) and on the device
# (the default on CUDA: Ops::sample_rows), with the same sampled requests (seeded temperature,
# top_k/top_p/min_p, n=2 with logprobs, a logit_bias request that stays on the host, greedy).
# The replies must be the same text; logprobs equal within 2e-6 (the device sums exp() in another
# order: kernels/api/sample_rows.h). Prints "[sampling] serve ..." lines; exit 1 on a difference.
set -uo pipefail
bin=.gpurun/tensorfold
work=$(mktemp -d)
rc=0
start() {  # $1 TF_DEVICE_SAMPLING value ("" = default) -> sets port, pid
  TF_DEVICE_SAMPLING="$1" "$bin" serve --device cuda --host 127.0.0.1 --port 0 --cache-dir "$work/cache" \
    --context 2048 --parallel 8 --kv f32 --memory-reserve-gib 0 >"$work/serve$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    port=$(grep -o 'listening on http://[^ ]*' "$work/serve$1.log" | sed 's/.*://')
    [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "[sampling] serve (TF_DEVICE_SAMPLING=$1) did not start:"; tail -n 20 "$work/serve$1.log"; return 1
}
requests=(
  '{"temperature":0.8,"top_p":0.9,"seed":7,"max_tokens":48,"messages":[{"role":"user","content":"Tell me about the sea."}]}'
  '{"temperature":1.0,"top_k":40,"min_p":0.05,"seed":8,"max_tokens":48,"messages":[{"role":"user","content":"Name some birds."}]}'
  '{"temperature":0.9,"n":2,"logprobs":true,"top_logprobs":3,"seed":9,"max_tokens":24,"messages":[{"role":"user","content":"Count to five."}]}'
  '{"temperature":1.0,"logit_bias":{"100":3},"seed":10,"max_tokens":24,"messages":[{"role":"user","content":"Say hi."}]}'
  '{"temperature":0,"max_tokens":32,"messages":[{"role":"user","content":"Write a haiku about GPUs."}]}'
)
for mode in 0 ""; do
  if ! start "$mode"; then rc=1; continue; fi
  # One at a time: concurrent requests batch differently from run to run, and steps above
  # EXACT_ROWS rows use BF16 tensor cores, so even two host-sampling runs could differ then.
  # (Host and device rows in one step: tests/unit/engine_device_sampling_test.cc, CPU backend.)
  for i in "${!requests[@]}"; do
    body=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["model"]="GLM-5.3-Flash-demo"; d["reasoning_effort"]="none"; print(json.dumps(d))' "${requests[$i]}")
    curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" \
      >"$work/reply${mode}_$i.json"
  done
  curl -s "http://127.0.0.1:$port/metrics" >"$work/metrics$mode.txt"
  kill "$pid"; wait "$pid" 2>/dev/null
done
python3 - "$work" "${#requests[@]}" <<'PY' || rc=1
import json, sys, os
work, n = sys.argv[1], int(sys.argv[2])
ok = True
for i in range(n):
    try:
        h = json.load(open(os.path.join(work, f"reply0_{i}.json")))
        d = json.load(open(os.path.join(work, f"reply_{i}.json")))
    except Exception as e:
        print(f"[sampling] serve request {i}: no reply ({e})"); ok = False; continue
    if "choices" not in h or "choices" not in d:
        print(f"[sampling] serve request {i}: error reply: {str(h)[:300]} / {str(d)[:300]}"); ok = False; continue
    same = [a["message"]["content"] == b["message"]["content"] for a, b in zip(h["choices"], d["choices"])]
    worst = 0.0
    for a, b in zip(h["choices"], d["choices"]):
        la = (a.get("logprobs") or {}).get("content") or []
        lb = (b.get("logprobs") or {}).get("content") or []
        if len(la) != len(lb): same.append(False)
        for x, y in zip(la, lb):
            if x["token"] != y["token"]: same.append(False)
            worst = max(worst, abs(x["logprob"] - y["logprob"]))
            for tx, ty in zip(x.get("top_logprobs", []), y.get("top_logprobs", [])):
                if tx["token"] != ty["token"]: same.append(False)
                worst = max(worst, abs(tx["logprob"] - ty["logprob"]))
    good = all(same) and worst <= 2e-6 * 20
    ok = ok and good
    print(f"[sampling] serve request {i}: host vs device sampling replies equal: {all(same)}; "
          f"max |logprob diff| {worst:.3g}; text: {h['choices'][0]['message']['content'][:60]!r}")
sys.exit(0 if ok else 1)
PY
grep -h -E '^tensorfold:.*sampl|sampled_on_device' "$work"/metrics*.txt 2>/dev/null | head -n 4
grep -h 'sampling on the' "$work"/serve*.log | head -n 2 | sed 's/^/[sampling] /'
exit $rc
