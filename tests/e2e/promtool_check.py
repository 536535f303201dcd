#!/usr/bin/env python3
"""Starts fake_server, sends a few requests, scrapes /metrics and runs
`promtool check metrics` on it. Usage: promtool_check.py FAKE_SERVER PROMTOOL

promtool exits 1 on a parse error and 3 on lint problems. The issue asks for the
`tensorfold:` and vLLM (`vllm:`) names, and promtool's linter flags every name with a
colon ("metric names should not contain ':'"), as it does on vLLM's own /metrics. So:
a parse error fails; a lint problem other than that one rule fails; the colon rule
alone is accepted (and printed)."""
import json, subprocess, sys, urllib.request, urllib.error


def main(server_bin, promtool):
    proc = subprocess.Popen([server_bin, "0"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().split()[1])
        base = f"http://127.0.0.1:{port}"
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        for payload in (body, b"{bad json"):
            req = urllib.request.Request(base + "/v1/chat/completions", data=payload,
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=30).read()
            except urllib.error.HTTPError as e:
                assert e.code == 400, e.code
        metrics = urllib.request.urlopen(base + "/metrics", timeout=30).read()
        check = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True)
        out = (check.stdout + check.stderr).decode()
        print(out)
        colon_rule = "metric names should not contain ':'"
        other = [l for l in out.splitlines() if l.strip() and colon_rule not in l]
        if check.returncode not in (0, 3) or (check.returncode == 3 and other):
            print(f"promtool check metrics failed with {check.returncode}: {other}")
            return 1
        print("promtool: OK")
        return 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
