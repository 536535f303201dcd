"""Helpers the Python end-to-end tests share: a `tensorfold serve` process (started, its output collected, its
port read from the "listening on" line, requests to it), the ok/FAIL checks, and process liveness."""
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

START_TIMEOUT = 150  # covers generating the demo checkpoint on first use


class Checks:
    """Prints "ok   what" / "FAIL what" per check and remembers the failures."""

    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            self.failures.append(what)
        return cond

    def finish(self, name, t0):
        print("%s: %d failure(s), %.1f s" % (name, len(self.failures), time.time() - t0))
        sys.exit(1 if self.failures else 0)


class ServeProcess:
    """`args` (the binary and its arguments) started with `env`; waits for it to listen unless told not to."""

    def __init__(self, args, env=None, wait=True, timeout=START_TIMEOUT):
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines = []
        self.port = None
        self.model = None
        self.listening = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not wait:
            return
        if not self.listening.wait(timeout):
            self.kill()
            raise RuntimeError("did not listen within %d s:\n%s" % (timeout, self.log()))
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % self.port, timeout=30) as r:
            self.model = json.loads(r.read())["data"][0]["id"]

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.search(r"listening on http://[^\s:]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self.listening.set()

    def log(self, lines=60):
        return "".join(self.lines[-lines:])

    def wait_log(self, pattern, seconds=20, lines=60):
        """Whether `pattern` (a regex) shows in the last `lines` lines within `seconds`: a line a process wrote
        just before it exited may not have been read from the pipe yet."""
        deadline = time.time() + seconds
        while True:
            if re.search(pattern, self.log(lines)):
                return True
            if time.time() > deadline:
                return False
            time.sleep(0.05)

    def post(self, path, body, headers=None):
        """(status, parsed JSON body); HTTP errors are returned, not raised."""
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=json.dumps(body).encode(),
                                     headers=dict({"Content-Type": "application/json"}, **(headers or {})))
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def chat(self, content, max_tokens):
        """A greedy chat completion that runs max_tokens: ("reasoning|content", completion tokens)."""
        code, j = self.post("/v1/chat/completions", {"model": self.model, "max_tokens": max_tokens,
                                                     "messages": [{"role": "user", "content": content}],
                                                     "temperature": 0, "ignore_eos": True})
        if code != 200:
            raise RuntimeError("chat completion: HTTP %d %s" % (code, j))
        msg = j["choices"][0]["message"]
        return (msg.get("reasoning_content") or "") + "|" + (msg.get("content") or ""), j["usage"]["completion_tokens"]

    def wait(self, seconds):
        try:
            return self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, seconds=30):
        """SIGTERM, then SIGKILL after `seconds`; the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            if self.wait(seconds) is None:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def chats_together(server, prompts):
    """server.chat(content, max_tokens) for each prompt, all at once (their steps batch together); the replies."""
    out = [None] * len(prompts)

    def run(i):
        out[i] = server.chat(*prompts[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def pid_alive(pid):
    """Running: not gone and not a zombie (its parent may not have reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, seconds):
    """True once none of `pids` runs (waiting up to `seconds`)."""
    deadline = time.time() + seconds
    while any(pid_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    return not any(pid_alive(p) for p in pids)
