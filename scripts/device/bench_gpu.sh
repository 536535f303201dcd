#!/usr/bin/env bash
# Run ON the GPU machine from the repo root, after scripts/device/pack.sh here and a device call
# with carry: [".gpurun"]:   scripts/device/bench_gpu.sh
# Benchmarks the engine on synthetic GLM-5.3-Flash checkpoints beside the roofline (issue #6).
# Parts (BENCH_PARTS, any subset, default "full transformers"):
#   full          `tensorfold synth-checkpoint --preset full --experts $BENCH_EXPERTS` (8) under
#                 $BENCH_DIR (/dev/shm when it has room, else /tmp), then
#                 `tensorfold bench --offline --device cuda --scenario $BENCH_SCENARIOS --probe`
#                 (default "gpu": decode at 1/4/16/64 streams, prefill of 8K and 128K tokens;
#                 BENCH_OUTPUT_TOKENS = 64 per decode request; BENCH_PREFILL_CHUNK sets --prefill-chunk).
#   transformers  a scaled-down synthetic checkpoint (full widths, $BENCH_HF_LAYERS = 8 layers,
#                 8 experts, no MTP), timed by transformers (scripts/device/transformers_bench.py:
#                 batch-1 greedy decode and one prefill) and by our offline bench (decode-1 and
#                 prefill of the same lengths); prints the ratios.
# Writes $OUT/bench_gpu.json (everything measured, merged) and $OUT/bench_gpu.log (all output).
# Every step has a timeout inside $BENCH_DEADLINE_S (570 s: the device runs a command 600 s at
# most); a failed step prints "FAILED: <step>: ..." and the later steps still run. Exit 1 when
# any step failed. scripts/device/bench_results_md.py turns the JSON into a RESULTS.md section.
set -uo pipefail
: "${OUT:?run this on the device machine, where OUT is set}"
cd "$(dirname "$0")/../.."
exec > >(tee -a "$OUT/bench_gpu.log") 2>&1
export LD_LIBRARY_PATH="$PWD/.gpurun/lib:${LD_LIBRARY_PATH:-}"
# cuBLAS is not carried: take the GPU machine's (its CUDA toolkit, else the pip wheel).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; [print(os.path.join(p, s, "lib")) for p in nvidia.__path__ for s in os.listdir(p)]' 2>/dev/null); do
  ls "$d"/libcublasLt.so.* >/dev/null 2>&1 && { export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; break; }
done
export PYTHONUNBUFFERED=1

bin=.gpurun/tensorfold
parts_list=${BENCH_PARTS:-full transformers}
parts=" $parts_list "
experts=${BENCH_EXPERTS:-8}
scenarios=${BENCH_SCENARIOS:-gpu}
# Issue #6 measures the BF16 checkpoint as it is (DENSE=q4, the serving default, re-quantizes at load).
dense=${BENCH_DENSE:-bf16}
out_tokens=${BENCH_OUTPUT_TOKENS:-64}
hf_layers=${BENCH_HF_LAYERS:-8}
hf_prefill=${BENCH_HF_PREFILL:-2048}
deadline=$((SECONDS + ${BENCH_DEADLINE_S:-570}))
work=$(mktemp -d)
rc=0
failures=()

fail() { echo "FAILED: $1"; failures+=("$1"); rc=1; }
left() { echo $((deadline - SECONDS)); }
# run_step NAME MAX_SECONDS CMD...: runs with a timeout of min(MAX, time left - 10 s).
run_step() {
  local name=$1 max=$2; shift 2
  local t; t=$(left); t=$((t - 10)); ((t > max)) && t=$max
  if ((t < 20)); then fail "$name: skipped, no time left"; return 1; fi
  echo "== $name (timeout ${t}s): $*"
  local start=$SECONDS
  timeout --kill-after=10 "$t" "$@"
  local code=$?
  echo "== $name: exit $code after $((SECONDS - start)) s"
  if ((code == 124 || code == 137)); then fail "$name: timed out after ${t}s"; return 1; fi
  if ((code != 0)); then fail "$name: exit $code"; return 1; fi
  return 0
}

# Where the checkpoints go: /dev/shm when it holds $1 GB more, else /tmp (64 GB disk).
pick_dir() {
  local need_kb=$(($1 * 1024 * 1024)) d
  for d in ${BENCH_DIR:-} /dev/shm /tmp; do
    [[ -d "$d" && -w "$d" ]] || continue
    local avail; avail=$(df -Pk "$d" | awk 'NR==2 {print $4}')
    if [[ -n "$avail" ]] && ((avail > need_kb)); then echo "$d"; return 0; fi
  done
  return 1
}

[[ -x "$bin" ]] || { echo "FAILED: $bin missing: run scripts/device/pack.sh here and carry .gpurun"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$work/gpu.txt"
free -g | head -2
df -h /dev/shm /tmp | tail -n +2

if [[ "$parts" == *" full "* ]]; then
  # Full geometry: ~4.2 GB of bf16 weights per routed expert (42 layers x 50 MB) + ~17 GB of the rest.
  need=$((17 + experts * 21 / 10 + 4))
  if base=$(pick_dir "$need"); then
    ck="$base/tf-bench-full-$experts"
    rm -rf "$ck"
    if run_step "synth-checkpoint full geometry, $experts experts (~${need} GB) in $base" 300 \
        "$bin" synth-checkpoint --out "$ck" --preset full --experts "$experts"; then
      du -sh "$ck"
      run_step "bench --offline --device cuda --scenario $scenarios" 600 \
        "$bin" bench --offline --device cuda --model-dir "$ck" --scenario "$scenarios" --output-tokens "$out_tokens" \
        --probe --timeout 400 --dense "$dense" ${BENCH_PREFILL_CHUNK:+--prefill-chunk "$BENCH_PREFILL_CHUNK"} --json "$work/full.json"
    fi
    rm -rf "$ck"
  else
    fail "full: no folder with ${need} GB free (/dev/shm, /tmp; set BENCH_DIR)"
  fi
fi

if [[ "$parts" == *" transformers "* ]]; then
  if base=$(pick_dir 12); then
    ck="$base/tf-bench-hf-$hf_layers"
    rm -rf "$ck"
    if run_step "synth-checkpoint $hf_layers layers, 8 experts" 180 \
        "$bin" synth-checkpoint --out "$ck" --preset full --layers "$hf_layers" --experts 8 --mtp-layers 0; then
      du -sh "$ck"
      run_step "transformers: batch-1 decode + prefill $hf_prefill" 300 \
        python3 scripts/device/transformers_bench.py --model "$ck" --prompt-tokens 32 --output-tokens "$out_tokens" \
        --prefill-tokens "$hf_prefill" --json "$work/hf.json"
      run_step "tensorfold on the same checkpoint: decode-1, prefill-$hf_prefill" 300 \
        "$bin" bench --offline --device cuda --model-dir "$ck" --scenario "decode-1,prefill-$hf_prefill" \
        --output-tokens "$out_tokens" --probe --timeout 200 --dense "$dense" --json "$work/small.json"
    fi
    rm -rf "$ck"
  else
    fail "transformers: no folder with 12 GB free"
  fi
fi

# One JSON: the GPU, the command, each part's report, the ratios, the failures.
printf '%s\n' "${failures[@]}" > "$work/failures.txt"
python3 - "$work" "$OUT/bench_gpu.json" "BENCH_PARTS='$parts_list' BENCH_EXPERTS=$experts BENCH_SCENARIOS=$scenarios BENCH_OUTPUT_TOKENS=$out_tokens BENCH_HF_LAYERS=$hf_layers BENCH_HF_PREFILL=$hf_prefill scripts/device/bench_gpu.sh" <<'PY' || rc=1
import json, os, sys, datetime
work, dest, command = sys.argv[1:4]
def load(name):
    p = os.path.join(work, name)
    if not os.path.exists(p):
        return None
    try:
        return json.load(open(p))
    except Exception as e:  # a truncated file: say so rather than lose the rest
        return {"error": f"{name}: {e}"}
gpu = open(os.path.join(work, "gpu.txt")).read().strip() if os.path.exists(os.path.join(work, "gpu.txt")) else ""
res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "gpu": gpu,
       "command": command, "full": load("full.json"), "transformers": load("hf.json"),
       "tensorfold_small": load("small.json"),
       "failures": [l for l in open(os.path.join(work, "failures.txt")).read().splitlines() if l]}
def run(report, prefix):
    for r in (report or {}).get("runs", []):
        if r.get("scenario", "").startswith(prefix) and "summary" in r:
            return r
    return None
hf, small = res["transformers"], res["tensorfold_small"]
ratios = {}
if hf and small and "decode_tok_s" in hf:
    d = run(small, "decode-1")
    if d and d["summary"]["decode_tok_s"]["count"]:
        ratios["decode_batch1"] = d["summary"]["decode_tok_s"]["median"] / hf["decode_tok_s"]
    p = run(small, "prefill-")
    if p and p["summary"]["prefill_tok_s"]["count"] and hf.get("prefill_tok_s"):
        ratios["prefill"] = p["summary"]["prefill_tok_s"]["median"] / hf["prefill_tok_s"]
res["ratio_tensorfold_over_transformers"] = ratios
json.dump(res, open(dest, "w"), indent=1)
print("== summary")
for r in (res["full"] or {}).get("runs", []):
    s, rl = r.get("summary"), r.get("roofline") or {}
    if not s:
        print(f"{r.get('scenario')}: FAILED {r.get('error', '')}")
        continue
    if r["scenario"].startswith("decode"):
        m, b = s["decode_tok_s"]["median"], rl.get("decode_tok_s")
        a, ab = s["aggregate_tok_s"], rl.get("aggregate_tok_s")
        print(f"{r['scenario']}: decode {m:.1f} tok/s per stream" + (f" ({100*m/b:.1f}% of roofline {b:.1f})" if b else "")
              + f", aggregate {a:.1f} tok/s" + (f" ({100*a/ab:.1f}% of {ab:.1f})" if ab else ""))
    else:
        m, b = s["prefill_tok_s"]["median"], rl.get("prefill_tok_s")
        print(f"{r['scenario']}: prefill {m:.1f} tok/s, TTFT {s['ttft_s']['median']:.2f} s"
              + (f" ({100*m/b:.1f}% of roofline {b:.1f})" if b else ""))
if hf:
    print(f"transformers {hf.get('transformers', '?')}: decode {hf.get('decode_tok_s', 0):.1f} tok/s, "
          f"prefill {hf.get('prefill_tok_s', 0):.1f} tok/s ({hf.get('model_class', '?')})")
for k, v in ratios.items():
    print(f"ratio tensorfold / transformers, {k}: {v:.2f}x")
for f in res["failures"]:
    print("FAILED:", f)
print("wrote", dest)
PY
rm -rf "$work"
exit $rc
