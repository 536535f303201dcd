#!/usr/bin/env python3
"""A chat's second turn with and without REPLY_WARMUP, side by side in one run.

Usage: bench/chat_turns_bench.py [--facts N] [--reply N] [--pauses S,S] BINARY [SERVE ARGS...]
       (e.g. build/apps/tensorfold --model DIR --dense q4; the options come before BINARY)

Two servers (REPLY_WARMUP=1 and 0) take the same chat: a long system prompt, a reply of --reply tokens
(reasoning closed by thinking_budget, then an answer), then the next turn with the reasoning dropped by the
client, sent at once and again after a pause (a tool or a person). Each round has its own cache_salt. Prints
each turn-2's TTFT, prompt and cached tokens, and the tokens it ran against the floor (its new messages:
what a turn must run at least)."""
import argparse, json, os, re, subprocess, tempfile, time, urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("serve_args", nargs=argparse.REMAINDER)
ap.add_argument("--facts", type=int, default=160, help="system prompt size (facts of ~10 tokens)")
ap.add_argument("--reply", type=int, default=1500, help="reply tokens of turn 1")
ap.add_argument("--pauses", default="0,3", help="seconds before turn 2, one round each")
a = ap.parse_args()

def start(warm):
    work = tempfile.mkdtemp()
    log = open(work + "/serve.log", "w")
    args = [a.binary, "serve", "--host", "127.0.0.1", "--port", "0", "--parallel", "2", *a.serve_args]
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, REPLY_WARMUP=warm))
    for _ in range(3000):
        m = re.search(r"listening on http://[^ ]*:(\d+)", open(work + "/serve.log").read())
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit(open(work + "/serve.log").read()[-2000:])

def get(port, path):
    return json.loads(urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path)).read())

def chat(port, body):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port,
                                 data=json.dumps(dict(body, stream=True, stream_options={"include_usage": True})).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, reasoning, content, usage = None, "", "", None
    with urllib.request.urlopen(req) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            usage = j.get("usage") or usage
            for ch in j.get("choices", []):
                d = ch["delta"]
                if first is None and (d.get("reasoning_content") or d.get("content")):
                    first = time.perf_counter() - t0
                reasoning += d.get("reasoning_content") or ""
                content += d.get("content") or ""
    return first, usage, reasoning, content

def tokens(port, messages):
    req = urllib.request.Request("http://127.0.0.1:%d/tokenize" % port, data=json.dumps({"messages": messages, "add_generation_prompt": False}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())["count"]

servers = {w: start(w) for w in ("1", "0")}
try:
    facts = " ".join("fact%d is %d" % (i, (i * 7919) % 10007) for i in range(a.facts))
    turn1 = [{"role": "system", "content": "Notes: " + facts}, {"role": "user", "content": "Plan the work."}]
    for rnd, pause in enumerate(float(x) for x in a.pauses.split(",")):
        for warm, (_, port) in servers.items():
            salt = "round-%d" % rnd
            _, u1, reasoning, content = chat(port, {"messages": turn1, "max_tokens": a.reply, "temperature": 0, "ignore_eos": True,
                                                    "thinking_budget": a.reply * 3 // 4, "cache_salt": salt})
            time.sleep(pause)
            turn2 = turn1 + [{"role": "assistant", "content": content}, {"role": "user", "content": "Next step?"}]
            ttft, u2, _, _ = chat(port, {"messages": turn2, "max_tokens": 4, "temperature": 0, "cache_salt": salt})
            floor = u2["prompt_tokens"] - tokens(port, turn1 + [{"role": "assistant", "content": content, "reasoning_content": reasoning}])
            h = get(port, "/health")
            ran = u2["prompt_tokens"] - u2["prompt_tokens_details"]["cached_tokens"]
            print("REPLY_WARMUP=%s pause %.1f s: turn 1 %d + %d tokens | turn 2 prompt %d, cached %d, ran %d (floor %d) | TTFT %.3f s"
                  " | warm-ups so far %d (%d tokens)" % (warm, pause, u1["prompt_tokens"], u1["completion_tokens"], u2["prompt_tokens"],
                                                         u2["prompt_tokens_details"]["cached_tokens"], ran, floor, ttft,
                                                         h["reply_warmups_total"], h["reply_warmup_tokens_total"]), flush=True)
finally:
    for p, _ in servers.values():
        p.terminate()
