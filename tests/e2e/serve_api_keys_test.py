#!/usr/bin/env python3
"""API keys on the real `tensorfold serve` (demo checkpoint): API_KEY_FILE's keys are required, `./start.sh
reload` (SIGHUP) swaps them without a restart and keeps them when the new file is empty, the server survives
the signal, and `DRY_RUN=1 ./start.sh` prints the plan without starting anything.

Usage: serve_api_keys_test.py TENSORFOLD REPO_ROOT WORK_DIR
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from serve_process import Checks, pid_alive  # noqa: E402

binary, root, work = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
logs, state = os.path.join(work, "logs"), os.path.join(work, "state")
os.makedirs(logs)
os.makedirs(state)
key_file = os.path.join(work, "keys.txt")
check = Checks()
t0 = time.time()


def write_keys(text):
    with open(key_file, "w") as f:
        f.write(text)
    os.chmod(key_file, 0o600)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(port, headers):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/models" % port, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def bearer(key):
    return {"Authorization": "Bearer " + key}


def script_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("API_KEY", "API_KEY_FILE", "MODEL_DIR", "WORKER")}
    env.update(STATE_DIR=state, LOG_DIR=logs, **extra)
    return env


def run_script(args, env):
    return subprocess.run(["bash", os.path.join(root, "start.sh")] + args, env=env, capture_output=True, text=True,
                          timeout=60)


def log_text():
    with open(os.path.join(logs, "tensorfold.log")) as f:
        return f.read()


def wait_for_log(needle, count, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if log_text().count(needle) >= count:
            return True
        time.sleep(0.1)
    return False


# DRY_RUN: the plan, nothing started, no pid file, no build.
port = free_port()
write_keys("# the team's keys\nsk-first\n")
r = run_script([], script_env(DRY_RUN="1", PORT=str(port), API_KEY_FILE=key_file,
                              BUILD_DIR=os.path.join(work, "no-build")))
check(r.returncode == 0 and "DRY_RUN=1" in r.stdout and "serve --host 0.0.0.0 --port %d" % port in r.stdout and
      "prepare:" in r.stdout and "API_KEY_FILE" in r.stdout, "DRY_RUN prints the plan: %r %r" % (r.stdout, r.stderr))
check(not os.path.exists(os.path.join(work, "no-build")) and not os.path.exists(os.path.join(state, "tensorfold.pid")),
      "DRY_RUN builds and starts nothing")
write_keys("# no keys yet\n")
r = run_script([], script_env(DRY_RUN="1", PORT=str(port), API_KEY_FILE=key_file))
check(r.returncode != 0 and "lists no key" in r.stderr, "an API_KEY_FILE without keys stops start.sh: %r" % r.stderr)
# A CORS_ORIGINS entry that is no origin stops serve before the model loads, naming the entry.
for value, why in (("http://localhost:3000/", "no trailing slash"), ("https://*.example.com", "wildcards")):
    t0 = time.time()
    r = subprocess.run([binary, "serve", "--port", "0"], env=dict(os.environ, CORS_ORIGINS=value), capture_output=True,
                       text=True, timeout=60)
    check(r.returncode != 0 and value in r.stderr + r.stdout and why in r.stderr + r.stdout and time.time() - t0 < 10,
          "CORS_ORIGINS=%r is refused at once, naming it: %r" % (value, r.stderr + r.stdout))
r = run_script(["reload"], script_env(PORT=str(port)))
check(r.returncode != 0 and "not running" in r.stderr, "reload with no server says so: %r" % r.stderr)
r = run_script(["check"], script_env(PORT=str(port)))
check(r.returncode != 0 and "not running" in r.stderr, "check with no server says so: %r" % r.stderr)

# The server, started as start.sh starts it: its log under LOG_DIR, its pid in STATE_DIR.
write_keys("sk-one\n")
log = open(os.path.join(logs, "tensorfold.log"), "w")
env = dict(os.environ, API_KEY_FILE=key_file)
env.pop("API_KEY", None)
proc = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--context", "2048",
                         "--cache-dir", os.path.join(work, "cache")], stdout=log, stderr=subprocess.STDOUT, env=env)
with open(os.path.join(state, "tensorfold.pid"), "w") as f:
    f.write(str(proc.pid))
# Reaped as soon as it exits, as init reaps start.sh's server: stop.sh waits for the pid to be gone.
reaper = threading.Thread(target=proc.wait, daemon=True)
reaper.start()
try:
    listening = wait_for_log("listening on http", 1, 150)
    check(listening, "the server listens with API_KEY_FILE set")
    if not listening:
        print(log_text()[-3000:])
        check.finish("serve_api_keys", t0)
    check(status(port, {}) == 401, "no key: 401")
    check(status(port, bearer("sk-one")) == 200, "the file's key: 200")
    check(status(port, {"x-api-key": "sk-one"}) == 200, "the file's key as x-api-key: 200")
    check(status(port, bearer("sk-two")) == 401, "a key not yet in the file: 401")

    write_keys("sk-two\n# sk-one revoked\n")
    r = run_script(["reload"], script_env(PORT=str(port)))
    check(r.returncode == 0 and "1 key(s) in force" in r.stdout, "./start.sh reload reports the keys in force: %r %r"
          % (r.stdout, r.stderr))
    check(status(port, bearer("sk-two")) == 200 and status(port, bearer("sk-one")) == 401,
          "after the reload the new key works and the revoked one does not")

    write_keys("")
    r = run_script(["reload"], script_env(PORT=str(port)))
    check(r.returncode != 0 and "keys in force stay" in r.stdout, "an emptied file is refused: %r" % r.stdout)
    check(status(port, bearer("sk-two")) == 200 and status(port, {}) == 401,
          "after a refused reload the old keys stay in force")
    check(proc.poll() is None and pid_alive(proc.pid), "the server survives SIGHUP")

    # ./start.sh check: the live checks against the running server, with the key in force.
    build_dir = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    r = run_script(["check", "prompt_reuse", "--reuse-tokens", "400"],
                   script_env(PORT=str(port), API_KEY="sk-two", BUILD_DIR=build_dir))
    check(r.returncode == 0 and re.search(r"^prompt_reuse +PASS", r.stdout, re.M) and "1 of 1 checks passed" in r.stdout,
          "./start.sh check runs tensorfold check with the key: %r %r" % (r.stdout, r.stderr))

    # stop.sh asks /health (with the key) whether requests run, then stops the server.
    r = subprocess.run(["bash", os.path.join(root, "stop.sh")], env=script_env(PORT=str(port), API_KEY="sk-two"),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "stopped" in r.stdout and "SIGKILL" not in r.stdout,
          "stop.sh stops it with SIGTERM: %r %r" % (r.stdout, r.stderr))
    reaper.join(30)
    check(proc.returncode == 0, "the server exits 0 after SIGTERM")
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    log.close()
check.finish("serve_api_keys", t0)
