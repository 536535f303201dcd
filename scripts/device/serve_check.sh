#!/usr/bin/env bash
# Run ON the GPU machine (from gpu_tests.sh): `tensorfold serve` on the demo checkpoint with
# --device cpu and --device cuda; the same greedy chat reply from both, then `tensorfold bench`
# over HTTP against the CUDA server. Prints everything; exit 1 when a step fails or the replies differ.
# The replies are compared with the CUDA server at --exact-rows 64 ("cuda-exact"): by default
# CUDA prefill rows go through bf16 tensor cores (activations rounded to bf16, as transformers
# does in bf16), which moves the demo's random-weight logits by ~1e-3, enough to reorder its
# near-uniform top tokens (H200, 2026-11-30: first differing token at position 4; with
# --exact-rows 64 the logprobs agree to ~5e-7). The bench runs against the default server.
set -uo pipefail
bin=.gpurun/tensorfold
work=$(mktemp -d)
rc=0
# $1 device (cuda-exact: cuda with --exact-rows 64; cuda-nocopy: no drafts (COPY=0, DRAFTER=none); cuda-copy2:
# COPY_MATCH=2; cuda-mtp: MTP drafts only (COPY=0, DRAFTER=mtp)) -> sets port, pid
start() {
  local dev="$1" extra=()
  [[ "$dev" == cuda-exact ]] && { dev=cuda; extra=(--exact-rows 64); }
  [[ "$dev" == cuda-nocopy ]] && { dev=cuda; extra=(--copy 0 --drafter none); }
  [[ "$dev" == cuda-mtp ]] && { dev=cuda; extra=(--copy 0 --drafter mtp); }
  [[ "$dev" == cuda-copy2 ]] && { dev=cuda; extra=(--copy-match 2); }
  "$bin" serve --device "$dev" "${extra[@]}" --host 127.0.0.1 --port 0 --cache-dir "$work/cache" --context 4096 --parallel 4 \
    --kv f32 --memory-reserve-gib 0 >"$work/$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    port=$(grep -o 'listening on http://[^ ]*' "$work/$1.log" | sed 's/.*://')
    [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "serve --device $1 did not start:"; cat "$work/$1.log"; return 1
}
chat() {
  curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' -d \
    '{"model":"GLM-5.3-Flash-demo","messages":[{"role":"user","content":"Write a haiku about GPUs."}],
      "temperature":0,"max_tokens":64,"reasoning_effort":"none"}'
}
# An image (the demo's small random vision tower): the same prompt length on every device, and a reply.
image_chat() {
  python3 - "$port" <<'PY'
import base64, json, sys, urllib.request
png = base64.b64encode(open("tests/data/model/tiny-vision/images/c_down_300x400.png", "rb").read()).decode()
body = {"model": "GLM-5.3-Flash-demo", "temperature": 0, "max_tokens": 16, "reasoning_effort": "none",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                     {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}}]}]}
req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % sys.argv[1], data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=120).read().decode())
PY
}
# Prompt reuse: a long chat (temperature 1, no seed) sent twice; the second resumes from the first's kept
# state (cached_tokens > 0) and gives the same reply bit for bit (its logprobs too).
reuse_check() {
  python3 - "$port" <<'PY'
import json, sys, urllib.request
words = " ".join("fact%d" % ((i * 37) % 211) for i in range(600))
body = {"model": "GLM-5.3-Flash-demo", "temperature": 1, "max_tokens": 16, "logprobs": True, "ignore_eos": True,
        "messages": [{"role": "system", "content": "Remember: " + words}, {"role": "user", "content": "Which first?"}]}
def ask():
    req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % sys.argv[1], data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=300).read())
a, b = ask(), ask()
cached = [r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for r in (a, b)]
lp = lambda r: [t["logprob"] for t in r["choices"][0]["logprobs"]["content"]]
same = a["choices"][0]["message"] == b["choices"][0]["message"] and lp(a) == lp(b)
print("prompt reuse: prompt %d tokens, cached %s, same reply and logprobs: %s" % (a["usage"]["prompt_tokens"], cached, same))
sys.exit(0 if same and cached[0] == 0 and cached[1] > 0 else 1)
PY
}
# Prompt reuse past a picture: a chat with an image and a long text after it, sent twice; the second
# resumes past the picture, whose patches the vision tower then skips, with the same reply and logprobs.
image_reuse_check() {
  python3 - "$port" <<'PY'
import base64, json, sys, urllib.request
png = base64.b64encode(open("tests/data/model/tiny-vision/images/c_down_300x400.png", "rb").read()).decode()
words = " ".join("item%d" % ((i * 53) % 307) for i in range(700))
body = {"model": "GLM-5.3-Flash-demo", "temperature": 1, "max_tokens": 12, "logprobs": True, "ignore_eos": True,
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}},
                                                  {"type": "text", "text": "List these: " + words}]}]}
base = "http://127.0.0.1:%s" % sys.argv[1]
def ask():
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=300).read())
health = lambda: json.loads(urllib.request.urlopen(base + "/health", timeout=30).read())
h0 = health()
a, b = ask(), ask()
h1 = health()
cached = [r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for r in (a, b)]
lp = lambda r: [t["logprob"] for t in r["choices"][0]["logprobs"]["content"]]
same = a["choices"][0]["message"] == b["choices"][0]["message"] and lp(a) == lp(b)
skipped = h1["vision_patches_skipped_total"] - h0["vision_patches_skipped_total"]
encoded = h1["vision_patches_total"] - h0["vision_patches_total"]
print("prompt reuse past a picture: prompt %d tokens, cached %s, patches encoded %d, skipped %d, same reply and logprobs: %s"
      % (a["usage"]["prompt_tokens"], cached, encoded, skipped, same))
sys.exit(0 if same and cached[0] == 0 and cached[1] > 0 and skipped > 0 and skipped == encoded else 1)
PY
}
# Copy drafts (speculative decoding): replies whose tokens are narrowed by logit_bias to a few, so they repeat
# and copy drafts fire (COPY_MATCH 2 on one server), greedy and sampled with a seed and logprobs, and one forced
# token; prints each reply's fingerprint and, with --count, the server's speculation counters after them.
copy_check() {
  python3 - "$port" "$@" <<'PY'
import hashlib, json, sys, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=300).read())
ids = post("/tokenize", {"model": "GLM-5.3-Flash-demo", "prompt": " harbour light sea", "add_special_tokens": False})["tokens"]
out = []
for temperature, seed, bias in ((0, None, ids), (1, 7, ids), (1, 11, ids[:1])):
    body = {"model": "GLM-5.3-Flash-demo", "prompt": "Say it again:", "max_tokens": 96, "temperature": temperature,
            "ignore_eos": True, "logprobs": 2, "logit_bias": {str(t): 30 for t in bias}}
    if seed is not None:
        body["seed"] = seed
    r = post("/v1/completions", body)
    c = r["choices"][0]
    out.append(hashlib.sha256(json.dumps([c["text"], c["logprobs"]["token_logprobs"]]).encode()).hexdigest()[:16])
print(" ".join(out))
if "--count" in sys.argv:
    h = json.loads(urllib.request.urlopen(base + "/health", timeout=30).read())
    print("speculation:", json.dumps(h["speculation"]), file=sys.stderr)
PY
}
for dev in cuda-nocopy cuda-copy2 cuda-mtp; do
  if ! start "$dev"; then rc=1; continue; fi
  copy_check --count >"$work/$dev.copy" || rc=1
  echo "== $dev copy-draft replies: $(cat "$work/$dev.copy")"
  kill "$pid"; wait "$pid" 2>/dev/null
done
for dev in cuda-copy2 cuda-mtp; do
  if [[ -s "$work/cuda-nocopy.copy" ]] && cmp -s "$work/cuda-nocopy.copy" "$work/$dev.copy"; then
    echo "$dev: replies and logprobs equal to those without drafts (greedy, sampled with a seed, forced)"
  else
    echo "$dev: replies differ from those without drafts"; rc=1
  fi
done
for dev in cpu cuda-exact cuda; do
  if ! start "$dev"; then rc=1; continue; fi
  chat >"$work/$dev.json"
  echo "== $dev reply: $(head -c 600 "$work/$dev.json")"
  image_chat >"$work/$dev.image.json" || rc=1
  echo "== $dev image reply: $(head -c 600 "$work/$dev.image.json")"
  reuse_check || rc=1
  image_reuse_check || rc=1
  if [[ "$dev" == cuda ]]; then
    for c in 1 4 16; do
      echo "== bench --device cuda, concurrency $c"
      "$bin" bench --url "http://127.0.0.1:$port" --concurrency "$c" --requests $((c * 2)) --prompt-tokens 512 \
        --output-tokens 128 --json "$work/bench_$c.json" 2>&1 | tail -n 14 || rc=1
    done
  fi
  kill "$pid"; wait "$pid" 2>/dev/null
  tail -n 3 "$work/$dev.log"
done
python3 - "$work/cpu.json" "$work/cuda-exact.json" <<'PY' || rc=1
import json, sys
a, b = (json.load(open(p))["choices"][0]["message"]["content"] for p in sys.argv[1:3])
print("greedy replies equal (cpu vs cuda --exact-rows 64):", a == b)
sys.exit(0 if a == b else 1)
PY
# The image prompt: same length everywhere (the tower's bf16 matmuls on CUDA may move the reply).
python3 - "$work"/cpu.image.json "$work"/cuda-exact.image.json "$work"/cuda.image.json <<'PY' || rc=1
import json, sys
n = [json.load(open(p))["usage"]["prompt_tokens"] for p in sys.argv[1:]]
print("image prompt tokens (cpu, cuda-exact, cuda):", n)
sys.exit(0 if len(set(n)) == 1 else 1)
PY
exit $rc
