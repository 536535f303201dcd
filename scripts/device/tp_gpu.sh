#!/usr/bin/env bash
# Run ON a multi-GPU machine (from gpu_tests.sh, part "tp"; after scripts/device/pack.sh here and a
# device call with carry: [".gpurun"]): tensor parallelism on CUDA ranks with NCCL (issue #7).
#   1. comm_nccl_check: the rank-order sum kernel; the exact-result suite at --world 2 (and 4 when
#      there are 4 GPUs); a rank SIGKILLed mid all-reduce (the others exit within 10 s); --graph:
#      all-reduces captured into CUDA graphs equal the rank-order sum bit for bit, their time per
#      call in a graph vs eager (two ranks: ncclAllReduce, and TF_NCCL_ALL_REDUCE=gather for the
#      all-gather + sum kernel), and a rank SIGKILLed while the others replay graphs.
#   2. greedy equality: `tensorfold serve --device cuda --tp N` for N = 1, 2 (, 4) on the demo
#      checkpoint, a tiny synthetic one and a full-width synthetic one with $TP_EQ_LAYERS layers;
#      the same chat requests at temperature 0 with logprobs; the replies must be equal to TP=1's
#      text, and the max |logprob difference| of the chosen and top-5 tokens is printed.
#   3. a follower SIGKILLed mid-request: rank 0 must exit (code 1) within 20 s naming the rank, and
#      the port must be free again.
#   4. benchmark: `tensorfold bench --offline --device cuda --tp N` (decode-1, decode-4, decode-64)
#      on a synthetic full-geometry checkpoint ($TP_BENCH_LAYERS layers, $TP_BENCH_EXPERTS experts),
#      tok/s, speedup and scaling efficiency vs TP=1. Decode steps run as CUDA graphs at every TP
#      (the collectives captured); the all-reduce time per step is that of the eager (timed) calls,
#      plus, for graph steps, 2 x layers x the per-call time in a graph that part 1 measured.
#      TP_BENCH_EAGER=1 also runs TP=2 with TF_GRAPHS=0 (the eager steps, for comparison).
# Everything goes to $OUT/tp_gpu.log (rank logs included: followers share rank 0's stderr), the
# figures to $OUT/tp_gpu.json; key lines (prefixed "tp:") to stdout. Exit 1 when a check fails.
# TP_SERVE_FLAGS adds flags to every `serve` (e.g. "--exact-rows 64": every step on the f32 row kernels).
# TP_PARTS (default "nccl equal kill bench") picks steps; TP_DEADLINE_S (default 540) bounds it all.
# For a dry run of the script's logic on a CPU machine: TP_DEVICE=cpu TP_SIZES="1 2" TP_BIN=build/apps/tensorfold.
set -uo pipefail
: "${OUT:?run this on the device machine, where OUT is set}"
cd "$(dirname "$0")/../.."
exec 3>&1 > >(tee -a "$OUT/tp_gpu.log" | grep --line-buffered -E '^(tp:|FAILED)' >&3) 2>&1
export LD_LIBRARY_PATH="$PWD/.gpurun/lib:${LD_LIBRARY_PATH:-}"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; [print(os.path.join(p, s, "lib")) for p in nvidia.__path__ for s in os.listdir(p)]' 2>/dev/null); do
  ls "$d"/libcublasLt.so.* >/dev/null 2>&1 && { export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; break; }
done
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export PYTHONUNBUFFERED=1

bin=${TP_BIN:-.gpurun/tensorfold}
check=.gpurun/comm_nccl_check
device=${TP_DEVICE:-cuda}
# BF16 matrices as the checkpoint holds them: DENSE=q4 (the default) quantizes each rank's shard with
# its own group scales, which TP=1 does not reproduce bit for bit (TP_DENSE=q4 to measure that too).
dense=${TP_DENSE:-bf16}
parts=" ${TP_PARTS:-nccl equal kill bench} "
deadline=$((SECONDS + ${TP_DEADLINE_S:-540}))
work=$(mktemp -d)
results="$work/results.jsonl"  # one JSON object per line, merged at the end
: >"$results"
rc=0
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
tps=(1)
for n in 2 4 8; do ((n <= ngpu)) && tps+=("$n"); done
[[ -n "${TP_SIZES:-}" ]] && read -r -a tps <<<"$TP_SIZES"
nranks=${tps[-1]}
echo "tp: $ngpu GPUs visible; TP sizes ${tps[*]} on $device"
nvidia-smi topo -m 2>/dev/null | head -n 12

fail() { echo "FAILED: $*"; echo "{\"failure\": $(printf '%s' "$*" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}" >>"$results"; rc=1; }
left() { echo $((deadline - SECONDS)); }
# bounded MAX CMD...: the command with a timeout of min(MAX, time left - 5 s).
bounded() {
  local max=$1; shift
  local t; t=$(($(left) - 5)); ((t > max)) && t=$max
  if ((t < 5)); then echo "no time left for: $*"; return 124; fi
  timeout --kill-after=5 "$t" "$@"
}

# serve_start NAME DIR TP [extra flags...] -> sets pid, port; the log is $work/NAME.log
serve_start() {
  local name=$1 dir=$2 tp=$3; shift 3
  local model=()
  [[ -n "$dir" ]] && model=(--model "$dir")
  "$bin" serve "${model[@]}" --device "$device" --tp "$tp" --host 127.0.0.1 --port 0 --cache-dir "$work/cache" \
    --context 4096 --parallel 4 --kv f32 --dense "$dense" --memory-reserve-gib 0 --kv-pool-gib 2 ${TP_SERVE_FLAGS:-} "$@" \
    >"$work/$name.log" 2>&1 &
  pid=$!
  port=
  for _ in $(seq 1 900); do
    port=$(grep -o 'listening on http://[^ ]*' "$work/$name.log" | sed 's/.*://')
    [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    ((SECONDS < deadline)) || break
    sleep 0.2
  done
  fail "serve $name did not start"
  kill -9 "$pid" 2>/dev/null
  return 1
}
serve_stop() {
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
# chat PROMPT MAX_TOKENS -> the response JSON on stdout
chat() {
  python3 - "$port" "$1" "$2" <<'PY'
import json, sys, urllib.request
port, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": n,
        "logprobs": True, "top_logprobs": 5, "reasoning_effort": "none"}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(req, timeout=120).read().decode())
except Exception as e:
    print(json.dumps({"error": str(e)}))
PY
}
# Nobody listens on the port any more (a connection is refused). Binding it could still fail for a
# while on the closed connections' TIME_WAIT/FIN_WAIT sockets, which is not a leak.
port_free() {
  python3 -c "import socket,sys; s=socket.socket(); sys.exit(0 if s.connect_ex(('127.0.0.1', int(sys.argv[1]))) != 0 else 1)" "$1"
}

# ---- 1. NCCL communicator across processes
if [[ "$parts" == *" nccl "* ]]; then
  echo "== comm_nccl_check"
  bounded 60 "$check" --kernel 1 || fail "comm_nccl_check --kernel 1"
  for n in "${tps[@]}"; do
    ((n > 1)) || continue
    bounded 120 "$check" --world "$n" && echo "tp: comm_nccl_check --world $n PASSED" || fail "comm_nccl_check --world $n"
  done
  if ((ngpu >= 2)); then
    bounded 120 "$check" --world 2 --kill 1 && echo "tp: comm_nccl_check --world 2 --kill 1 PASSED" ||
      fail "comm_nccl_check --world 2 --kill 1"
    # Captured collectives: bits, time per call (graph vs eager), a rank killed mid-replay.
    # The "tp: all-reduce f32 [R x H] ..." lines are kept for the bench's per-step figure.
    for n in "${tps[@]}"; do
      ((n > 1)) || continue
      bounded 120 "$check" --world "$n" --graph 1 --hidden "${TP_HIDDEN:-4096}" 2>&1 | tee -a "$work/nccl-graph.log"
      [[ ${PIPESTATUS[0]} == 0 ]] && echo "tp: comm_nccl_check --world $n --graph 1 PASSED" ||
        fail "comm_nccl_check --world $n --graph 1"
    done
    TF_NCCL_ALL_REDUCE=gather bounded 120 "$check" --world 2 --graph 1 --hidden "${TP_HIDDEN:-4096}" ||
      fail "comm_nccl_check --world 2 --graph 1 (TF_NCCL_ALL_REDUCE=gather)"
    bounded 120 "$check" --world 2 --graph 1 --kill 1 && echo "tp: comm_nccl_check --world 2 --graph 1 --kill 1 PASSED" ||
      fail "comm_nccl_check --world 2 --graph 1 --kill 1"
  fi
fi

# ---- 2. greedy equality TP=N vs TP=1
prompts=("Write a haiku about GPUs." "List three prime numbers and explain why they are prime."
         "Translate 'tensor parallelism' into French, then explain it in one sentence.")
if [[ "$parts" == *" equal "* ]]; then
  ck_tiny="$work/synth-tiny"
  ck_wide="$work/synth-wide"
  bounded 120 "$bin" synth-checkpoint --out "$ck_tiny" --preset tiny || fail "synth-checkpoint tiny"
  bounded 180 "$bin" synth-checkpoint --out "$ck_wide" --preset full --layers "${TP_EQ_LAYERS:-4}" --experts 8 \
    --mtp-layers 0 || fail "synth-checkpoint full width, ${TP_EQ_LAYERS:-4} layers"
  for ck in demo tiny wide; do
    case $ck in demo) dir= ;; tiny) dir=$ck_tiny ;; wide) dir=$ck_wide ;; esac
    [[ -z "$dir" || -f "$dir/config.json" ]] || continue
    for tp in "${tps[@]}"; do
      ((tp <= 4)) || continue
      name="eq-$ck-tp$tp"
      echo "== $name"
      serve_start "$name" "$dir" "$tp" || { cat "$work/$name.log"; continue; }
      for i in "${!prompts[@]}"; do chat "${prompts[$i]}" 48 >"$work/$name-$i.json"; done
      serve_stop
      cat "$work/$name.log"
    done
    python3 - "$work" "$ck" "${#prompts[@]}" "${tps[@]}" >>"$results" <<'PY' || rc=1
import json, sys
work, ck, n, tps = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(t) for t in sys.argv[4:]]
tps = [t for t in tps if t <= 4]
def load(tp, i):
    try:
        return json.load(open(f"{work}/eq-{ck}-tp{tp}-{i}.json"))
    except Exception as e:
        return {"error": str(e)}
ok, out = True, {"check": "greedy_equality", "checkpoint": ck, "by_tp": {}}
for tp in tps[1:]:
    same, maxdiff, tokens, errors = 0, 0.0, 0, []
    for i in range(n):
        a, b = load(1, i), load(tp, i)
        if "choices" not in a or "choices" not in b:
            errors.append(f"prompt {i}: {a.get('error') or b.get('error') or 'no choices'}")
            continue
        ca, cb = a["choices"][0], b["choices"][0]
        ta, tb = ca["message"].get("content") or "", cb["message"].get("content") or ""
        same += ta == tb
        la = (ca.get("logprobs") or {}).get("content") or []
        lb = (cb.get("logprobs") or {}).get("content") or []
        for x, y in zip(la, lb):
            if x["token"] != y["token"]:
                break  # diverged: later positions compare different contexts
            tokens += 1
            maxdiff = max(maxdiff, abs(x["logprob"] - y["logprob"]))
            # Keyed by the token's bytes: several partial UTF-8 tokens all print as U+FFFD.
            key = lambda t: (t["token"], tuple(t.get("bytes") or ()))
            tx = {key(t): t["logprob"] for t in x.get("top_logprobs", [])}
            for t in y.get("top_logprobs", []):
                if key(t) in tx:
                    maxdiff = max(maxdiff, abs(tx[key(t)] - t["logprob"]))
        if ta != tb:
            print(f"tp: {ck} TP={tp} prompt {i} DIFFERS from TP=1:\n  TP=1: {ta[:300]!r}\n  TP={tp}: {tb[:300]!r}", file=sys.stderr)
    good = same == n and not errors
    ok = ok and good
    out["by_tp"][tp] = {"equal_replies": same, "prompts": n, "max_abs_logprob_diff": maxdiff,
                        "tokens_compared": tokens, "errors": errors}
    print(f"tp: {ck}: TP={tp} vs TP=1: {same}/{n} greedy replies equal, max |dlogprob| {maxdiff:.3g} over {tokens} "
          f"tokens{' ' + '; '.join(errors) if errors else ''} -> {'PASSED' if good else 'FAILED'}", file=sys.stderr)
print(json.dumps(out))
sys.exit(0 if ok else 1)
PY
  done
  rm -rf "$ck_tiny" "$ck_wide"
fi

# ---- 3. a follower dies mid-request
if [[ "$parts" == *" kill "* ]] && ((nranks >= 2)); then
  echo "== kill a follower"
  if serve_start kill "" 2; then
    follower=$(pgrep -P "$pid" | head -n 1)
    chat "Tell me a very long story about a lighthouse." 3000 >"$work/kill-chat.json" &
    chat_pid=$!
    sleep 1.5
    t0=$SECONDS
    echo "killing follower pid ${follower:-?} (rank 0 pid $pid, port $port)"
    [[ -n "$follower" ]] && kill -9 "$follower"
    exited=0
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || { exited=1; break; }; sleep 0.2; done
    ((exited)) || kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    code=$?
    took=$((SECONDS - t0))
    wait "$chat_pid" 2>/dev/null
    cat "$work/kill.log"
    echo "chat reply: $(head -c 300 "$work/kill-chat.json")"
    free=0
    port_free "$port" && free=1
    ss -tanp 2>/dev/null | grep ":$port " | head -n 5
    named=0
    grep -q 'rank 1 exited' "$work/kill.log" && named=1
    echo "{\"check\": \"kill_follower\", \"rank0_exited\": $exited, \"exit_code\": $code, \"seconds\": $took, \"port_released\": $free, \"message_names_rank\": $named}" >>"$results"
    if ((exited && code == 1 && free && named && ${follower:-0} > 0)); then
      echo "tp: follower killed: rank 0 exited with code $code after ${took}s naming the rank; port $port released -> PASSED"
    else
      fail "follower killed: rank 0 exited=$exited code=$code after ${took}s, message names rank=$named, port free=$free"
    fi
  else
    cat "$work/kill.log"
  fi
fi

# ---- 4. benchmark
if [[ "$parts" == *" bench "* ]]; then
  layers=${TP_BENCH_LAYERS:-45}
  experts=${TP_BENCH_EXPERTS:-8}
  scen=${TP_BENCH_SCENARIOS:-decode-1,decode-4,decode-64}
  out_tokens=${TP_BENCH_OUTPUT_TOKENS:-32}
  base=/dev/shm
  [[ -w /dev/shm ]] || base=/tmp
  ck="$base/tf-tp-bench-$layers-$experts"
  rm -rf "$ck"
  echo "== bench: synth-checkpoint ${TP_BENCH_PRESET:-full} geometry, $layers layers, $experts experts in $base"
  if bounded 240 "$bin" synth-checkpoint --out "$ck" --preset "${TP_BENCH_PRESET:-full}" --layers "$layers" \
      --experts "$experts"; then
    du -sh "$ck"
    for tp in "${tps[@]}"; do
      ((tp <= 4)) || continue
      if (($(left) < 60)); then fail "bench --tp $tp: skipped, no time left"; continue; fi
      echo "== bench --offline --device cuda --tp $tp --scenario $scen"
      bounded 300 "$bin" bench --offline --device "$device" --tp "$tp" --model-dir "$ck" --scenario "$scen" \
        --output-tokens "$out_tokens" --dense "$dense" --timeout 200 --json "$work/bench-tp$tp.json" ||
        fail "bench --tp $tp (exit $?)"
    done
    if [[ "${TP_BENCH_EAGER:-0}" == 1 ]] && ((nranks >= 2)) && (($(left) >= 90)); then
      echo "== bench --offline --device cuda --tp 2 --scenario $scen with TF_GRAPHS=0 (eager steps)"
      TF_GRAPHS=0 bounded 300 "$bin" bench --offline --device "$device" --tp 2 --model-dir "$ck" --scenario "$scen" \
        --output-tokens "$out_tokens" --dense "$dense" --timeout 200 --json "$work/bench-tp2eager.json" ||
        fail "bench --tp 2 TF_GRAPHS=0 (exit $?)"
    fi
    python3 - "$work" "$layers" "$experts" "${tps[@]}" >>"$results" <<'PY'
import json, os, re, sys
work, layers, experts, tps = sys.argv[1], int(sys.argv[2]), sys.argv[3], [int(t) for t in sys.argv[4:]]
# Part 1's time per captured all-reduce: {(world, rows): us}.
graph_us = {}
if os.path.exists(f"{work}/nccl-graph.log"):
    for m in re.finditer(r"all-reduce f32 \[(\d+) x \d+\] at world (\d+) \(([^)]*)\): ([\d.]+) us per call in a graph",
                         open(f"{work}/nccl-graph.log").read()):
        graph_us[(int(m.group(2)), int(m.group(1)))] = float(m.group(4))
rows = {}
keys = [(tp, str(tp)) for tp in tps] + [(2, "2eager")]
for tp, key in keys:
    p = f"{work}/bench-tp{key}.json"
    if not os.path.exists(p):
        continue
    for r in json.load(open(p)).get("runs", []):
        s = r.get("summary")
        if not s:
            continue
        rows.setdefault(r["scenario"], {})[key] = {
            "tp_size": tp, "graphs": key != "2eager",
            "decode_tok_s": s["decode_tok_s"]["median"], "aggregate_tok_s": s["aggregate_tok_s"],
            "ttft_s": s["ttft_s"]["median"], "tp": r.get("tp", {})}
out = {"check": "bench", "layers": layers, "experts": experts, "scenarios": rows,
       "graph_all_reduce_us": {f"{w}x{r}": v for (w, r), v in graph_us.items()}}
for sc, by in rows.items():
    base = by.get("1")
    streams = int(sc.split("-")[1]) if sc.startswith("decode-") else 0
    bucket = 1
    while bucket < streams:
        bucket *= 2
    for key, v in sorted(by.items()):
        tp = v["tp_size"]
        line = (f"tp: bench {sc} TP={tp}{'' if v['graphs'] else ' (eager, TF_GRAPHS=0)'}: decode "
                f"{v['decode_tok_s']:.1f} tok/s per stream, aggregate {v['aggregate_tok_s']:.1f} tok/s")
        t = v["tp"]
        if t.get("all_reduce_ms_per_step") is not None and tp > 1:
            line += (f", timed (eager) all-reduces {t['all_reduce_ms_per_step']:.3f} ms/step "
                     f"({t.get('all_reduce_calls', 0)} calls, {t.get('model_steps', 0)} steps)")
        us = graph_us.get((tp, bucket))
        if tp > 1 and v["graphs"] and us is not None:
            v["graph_all_reduce_ms_per_step"] = 2 * layers * us / 1e3
            line += f", in graphs ~{2 * layers * us / 1e3:.3f} ms/step ({2 * layers} x {us:.1f} us)"
        if base and tp > 1:
            sp = v["aggregate_tok_s"] / base["aggregate_tok_s"] if base["aggregate_tok_s"] else 0
            v["speedup"] = sp
            v["scaling_efficiency"] = sp / tp
            line += f", TP{tp}/TP1 {100 * sp:.0f}% (speedup {sp:.2f}x), scaling efficiency {100 * sp / tp:.0f}%"
        print(line, file=sys.stderr)
print(json.dumps(out))
PY
  else
    fail "synth-checkpoint for the bench"
  fi
  rm -rf "$ck"
fi

python3 - "$results" "$OUT/tp_gpu.json" "$ngpu" <<'PY'
import json, sys, datetime
items = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "gpus": int(sys.argv[3]), "results": items}, open(sys.argv[2], "w"), indent=1)
PY
echo "tp: wrote $OUT/tp_gpu.json; all output in $OUT/tp_gpu.log; exit $rc"
rm -rf "$work"
exec >&3 2>&3  # closes the pipe into tee/grep, which then flush the log and the "tp:" lines
sleep 1
exit $rc
