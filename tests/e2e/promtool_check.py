#!/usr/bin/env python3
"""Starts a server (fake_server or the real `tensorfold serve`), sends some traffic
(chat, streaming chat, completions, tokenize, a bad request, an unknown route), scrapes
/metrics and runs `promtool check metrics` on it; also checks that the vLLM names
dashboards use are present and that the counters saw the traffic.

Usage: promtool_check.py SERVER PROMTOOL [SERVER ARGS...]
  fake_server: no SERVER ARGS (it gets port 0); it prints "PORT <n>".
  tensorfold:  SERVER ARGS = serve --host 127.0.0.1 --port 0 ...; it prints
               "... listening on http://HOST:PORT".

promtool exits 1 on a parse error and 3 on lint problems. The issue asks for the
`tensorfold:` and vLLM (`vllm:`) names, and promtool's linter flags every name with a
colon ("metric names should not contain ':'"), as it does on vLLM's own /metrics. So:
a parse error fails; a lint problem other than that one rule fails; the colon rule
alone is accepted (and printed)."""
import json, re, subprocess, sys, threading, time, urllib.request, urllib.error

REQUIRED = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
            "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total", "tensorfold:kept_prompts"]


def wait_port(proc, timeout_s=120):
    """Reads stdout until the port line; keeps draining it afterwards."""
    found = {}

    def reader():
        for line in proc.stdout:
            m = re.search(r"listening on http://[^\s:]+:(\d+)", line) or re.match(r"PORT (\d+)", line)
            if m and "port" not in found:
                found["port"] = int(m.group(1))

    threading.Thread(target=reader, daemon=True).start()
    t0 = time.time()
    while "port" not in found:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening")
        if time.time() - t0 > timeout_s:
            raise RuntimeError("server did not print its port")
        time.sleep(0.05)
    return found["port"]


def call(base, path, body=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def sample_value(metrics, name):
    """Sum of every sample of `name` (any labels)."""
    total, seen = 0.0, False
    for line in metrics.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def main(server_bin, promtool, server_args):
    proc = subprocess.Popen([server_bin] + (server_args or ["0"]), stdout=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{wait_port(proc)}"
        msgs = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        traffic = [
            ("/v1/chat/completions", msgs, 200),
            ("/v1/chat/completions", dict(msgs, stream=True), 200),
            ("/v1/completions", {"prompt": "hello", "max_tokens": 3}, 200),
            ("/tokenize", {"prompt": "hello"}, 200),
            ("/v1/chat/completions", b"{bad json", 400),
            ("/v1/chat/completions", dict(msgs, model="no-such-model"), 404),
            ("/v1/no-such-route", {}, 404),
        ]
        for path, body, want in traffic:
            status, text = call(base, path, body)
            assert status == want, f"{path}: {status} {text[:200]!r}"
        status, raw = call(base, "/metrics")
        assert status == 200, status
        metrics = raw.decode()
        check = subprocess.run([promtool, "check", "metrics"], input=raw, capture_output=True)
        out = (check.stdout + check.stderr).decode()
        print(out)
        colon_rule = "metric names should not contain ':'"
        other = [l for l in out.splitlines() if l.strip() and colon_rule not in l]
        if check.returncode not in (0, 3) or (check.returncode == 3 and other):
            print(f"promtool check metrics failed with {check.returncode}: {other}")
            return 1
        missing = [n for n in REQUIRED if sample_value(metrics, n) is None]
        if missing:
            print(f"missing metrics: {missing}")
            return 1
        for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
            if not sample_value(metrics, name) > 0:
                print(f"{name} did not count the traffic")
                return 1
        if not re.search(r'status="400"', metrics) or not re.search(r'status="200"', metrics):
            print("request counters by status are missing")
            return 1
        print("promtool: OK")
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
