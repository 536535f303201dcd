#!/usr/bin/env python3
"""`tensorfold serve --tp 2` on CPU ranks (issue #7) against the real binary and the demo checkpoint:

- greedy chat completions (one alone, then two at once, so that their steps batch together) equal
  the ones `--tp 1` gives;
- rank 0 started exactly one follower process, which leaves when rank 0 stops on SIGTERM (exit 0);
- killing the follower (SIGKILL) makes rank 0 log "rank 1 exited (signal 9 ...)" and exit non-zero
  within a few seconds, and the HTTP port is released;
- killing rank 0 (SIGKILL) makes the follower exit too;
- a hung follower (SIGSTOP) makes rank 0 exit non-zero once --tp-timeout has passed;
- `--tp 2 --device cuda` with no GPU visible is refused at once, saying why (one GPU per rank);
- `tensorfold bench --offline --tp 2` runs and reports the all-reduces per model step.

Usage: serve_tp_test.py TENSORFOLD_BINARY CACHE_DIR
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from serve_process import START_TIMEOUT, Checks, ServeProcess, chats_together, wait_gone  # noqa: E402

BIN, CACHE = sys.argv[1], sys.argv[2]
check = Checks()
failures = check.failures


class Server(ServeProcess):
    def __init__(self, tp, extra=()):
        super().__init__([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--context", "1024", "--parallel", "2",
                          "--kv-pool-gib", "0.05", "--memory-reserve-gib", "0", "--cache-dir", CACHE, "--tp", str(tp),
                          # exact weights: DENSE=q4 groups would follow the TP shard boundaries (TP=2 != TP=1)
                          "--dense", "f32"] + list(extra))

    def children(self):
        """Pids whose parent is this server (its follower ranks)."""
        kids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if int(fields[1]) == self.proc.pid:
                kids.append(int(d))
        return kids


def port_free(port):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        return False
    except OSError:
        return True
    finally:
        s.close()


PROMPTS = [("Tell me about the lighthouse keeper and the storm.", 16), ("Hi there", 10)]
# An image: rank 0 encodes it and broadcasts the features with the prefill step.
_PNG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "model", "tiny-vision", "images",
                    "b_pad_130x90.png")
with open(_PNG, "rb") as _f:
    IMAGE_PROMPT = ([{"type": "text", "text": "What is this?"},
                     {"type": "image_url", "image_url": {"url": "data:image/png;base64," +
                                                         base64.b64encode(_f.read()).decode()}}], 8)


def replies(server):
    alone = (server.chat(*PROMPTS[0]), server.chat(*IMAGE_PROMPT))
    return alone, chats_together(server, PROMPTS)


t0 = time.time()

# --tp 2 --device cuda with no GPU visible (CUDA_VISIBLE_DEVICES=""; a CPU build has no CUDA at all):
# refused at once with a message that says why, before any rank starts or the port opens.
env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
gpu = subprocess.run([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--cache-dir", CACHE, "--tp", "2",
                      "--device", "cuda", "--context", "1024"], env=env, stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True, timeout=START_TIMEOUT)
check(gpu.returncode != 0 and "listening" not in gpu.stdout,
      "--tp 2 --device cuda without GPUs is refused (exit %d)" % gpu.returncode)
check(re.search(r"--tp 2 with --device cuda needs 2 GPUs \(one per rank\), but 0 are visible|built without CUDA",
                gpu.stdout) is not None, "... saying why:\n  %s" % gpu.stdout.strip()[-400:])
one = Server(1)
try:
    ref_alone, ref_together = replies(one)
finally:
    one.proc.send_signal(signal.SIGTERM)
    check(one.wait(30) == 0, "--tp 1 stops on SIGTERM with exit code 0")
check(ref_alone[0][1] == 16, "--tp 1 generated max_tokens tokens (%d)" % ref_alone[0][1])
check(ref_alone[1][1] == 8, "--tp 1 answered the image prompt (%d tokens)" % ref_alone[1][1])

two = Server(2)
try:
    kids = two.children()
    check(len(kids) == 1, "--tp 2 runs one follower process (%s)" % kids)
    alone, together = replies(two)
    check(alone == ref_alone, "--tp 2 greedy replies (text, image) equal --tp 1's:\n  tp2 %r\n  tp1 %r" % (alone, ref_alone))
    check(together == ref_together,
          "--tp 2 replies to two requests at once equal --tp 1's:\n  tp2 %r\n  tp1 %r" % (together, ref_together))
    two.proc.send_signal(signal.SIGTERM)
    code = two.wait(30)
    check(code == 0, "--tp 2 stops on SIGTERM with exit code 0 (%s)" % code)
    check(wait_gone(kids, 10), "the follower left with rank 0")
    check(two.wait_log(r"rank 0 stopped"), "the follower logged rank 0's stop command")
finally:
    two.kill()
    if failures:
        print(two.log(), file=sys.stderr)

three = Server(2)
try:
    kids = three.children()
    check(len(kids) == 1, "--tp 2 (again) runs one follower process")
    port = three.port
    three.chat("Warm up", 2)
    os.kill(kids[0], signal.SIGKILL)
    killed_at = time.time()
    code = three.wait(15)
    took = time.time() - killed_at
    check(code is not None and code != 0, "rank 0 exits non-zero once its follower is killed (code %s, %.1f s)"
          % (code, took))
    check(took < 10, "... within a few seconds (%.1f s)" % took)
    check(three.wait_log(r"rank 1 exited \(signal 9"),
          "rank 0 says which rank exited and how")
    check(port_free(port), "the HTTP port %d is released" % port)
finally:
    three.kill()
    if failures:
        print(three.log(), file=sys.stderr)

four = Server(2)
try:
    kids = four.children()
    check(len(kids) == 1, "--tp 2 (third start) runs one follower process")
    four.proc.kill()  # rank 0 dies without a word
    four.proc.wait()
    check(kids and wait_gone(kids, 10), "the follower exits when rank 0 is killed")
finally:
    four.kill()
    for k in four.children():
        os.kill(k, signal.SIGKILL)

five = Server(2, ["--tp-timeout", "3"])
try:
    kids = five.children()
    check(len(kids) == 1, "--tp 2 --tp-timeout 3 runs one follower process")
    os.kill(kids[0], signal.SIGSTOP)  # hung, not dead: only the timeout can tell
    stopped_at = time.time()
    code = five.wait(20)
    took = time.time() - stopped_at
    check(code is not None and code != 0, "rank 0 exits non-zero once its follower hangs (code %s, %.1f s)"
          % (code, took))
    check(five.wait_log(r"tensor-parallel rank lost"), "rank 0 says it lost a rank")
finally:
    five.kill()
    for k in kids:
        try:
            os.kill(k, signal.SIGKILL)
        except ProcessLookupError:
            pass

# --prompt-store at --tp 2: each rank writes its part of a kept state into its own folder; a restarted
# world resumes the same prompt from them (cached tokens, the same reply), and stops cleanly.
store = os.path.join(CACHE, "prompt_store")
shutil.rmtree(store, ignore_errors=True)
long_prompt = " ".join("word%d is a thing we talk about" % i for i in range(50))


def stored_chat(server):
    code, j = server.post("/v1/chat/completions", {"model": server.model, "max_tokens": 6, "temperature": 0,
                                                   "ignore_eos": True,
                                                   "messages": [{"role": "user", "content": long_prompt}]})
    check(code == 200, "a chat with --prompt-store: HTTP %d %s" % (code, j))
    if code != 200:
        return None, -1
    msg = j["choices"][0]["message"]
    return (msg.get("reasoning_content"), msg.get("content")), j["usage"]["prompt_tokens_details"]["cached_tokens"]


replies_from = []
for run in range(2):
    server = Server(2, ["--prompt-store", store])
    try:
        replies_from.append(stored_chat(server))
        server.proc.send_signal(signal.SIGTERM)
        check(server.wait(30) == 0, "--tp 2 --prompt-store stops on SIGTERM with exit code 0 (run %d)" % run)
    finally:
        server.kill()
        if failures:
            print(server.log(), file=sys.stderr)
folders = sorted(d for d in os.listdir(store)) if os.path.isdir(store) else []
parts = [f for d in folders for f in os.listdir(os.path.join(store, d)) if f.endswith(".tfstate")]
check(len(folders) == 2 and len(parts) == 2, "one folder and one state file per rank: %s %s" % (folders, parts))
if len(replies_from) == 2:
    (first, cached0), (again, cached1) = replies_from
    check(cached0 == 0 and cached1 >= 256, "the restarted world resumed from the store (cached %d, then %d)" % (cached0, cached1))
    check(first == again, "the resumed reply equals the first:\n  %r\n  %r" % (first, again))

# `tensorfold bench --offline --tp 2` (CPU ranks): the bench starts its follower like serve does, every
# request succeeds, and the report counts the model's steps and all-reduces per scenario.
report = os.path.join(CACHE, "bench_tp2.json")
bench = subprocess.run([BIN, "bench", "--offline", "--tp", "2", "--scenario", "decode-1,decode-2", "--output-tokens", "4",
                        "--context", "1024", "--kv-pool-gib", "0.05", "--memory-reserve-gib", "0", "--dense", "f32",
                        "--json", report],
                       env=dict(os.environ, TF_CACHE_DIR=CACHE), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=START_TIMEOUT)
check(bench.returncode == 0, "bench --offline --tp 2 succeeds (exit %d)" % bench.returncode)
try:
    runs = json.load(open(report))["runs"]
except (OSError, ValueError, KeyError) as e:
    runs = []
    check(False, "bench --tp 2 wrote its report: %s" % e)
for r in runs:
    tp = r.get("tp", {})
    check(tp.get("world") == 2 and tp.get("model_steps", 0) > 0 and tp.get("all_reduce_calls", 0) > tp["model_steps"],
          "bench %s: %s" % (r.get("scenario"), tp))
check(re.search(r"^tp 2: \d+ model steps, \d+ all-reduces", bench.stdout, re.M) is not None,
      "bench --tp 2 prints the all-reduce time per step")
if failures:
    print(bench.stdout[-3000:], file=sys.stderr)

check.finish("serve_tp", t0)
