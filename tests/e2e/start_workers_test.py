#!/usr/bin/env python3
"""start.sh / stop.sh / scripts/sync_workers.sh with a worker (WORKER=user@host), through tests/tools/fake_ssh.sh:
the "worker" is this machine, in a home folder of its own, with a login's environment, and an `ldd` that does
not find libspdlog unless the worker's folder has it (tests/tools/fake_worker_ldd.sh).

- sync_workers.sh copies the binary, the library the worker lacks (and only then finds every one), and the
  checkpoint (MODEL_DIR -> WORKER_DIR/models/NAME), and says how much memory the worker has;
- start.sh (PREPARE=0, after the sync) starts rank 0 with the rank on the worker, passes its smoke test and
  prints "is now LIVE!"; a chat completion works; /health answers;
- stop.sh stops both ranks; a rank left behind on the worker (its pid file in WORKER_DIR) is ended by stop.sh;
- what the user must fix is said: a worker that refuses the SSH login (ssh-copy-id), WORKER_MODEL_DIR without a
  config.json there, a WORKER that is not an SSH destination.

Usage: start_workers_test.py REPO_ROOT BUILD_DIR FAKE_SSH FAKE_LDD WORK_DIR
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

ROOT, BUILD, FAKE_SSH, FAKE_LDD, WORK = (os.path.abspath(a) for a in sys.argv[1:6])
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from serve_process import Checks, wait_gone  # noqa: E402

check = Checks()
failures = check.failures


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


shutil.rmtree(WORK, ignore_errors=True)
HOME = os.path.join(WORK, "worker-home")
WORKER_DIR = os.path.join(HOME, ".cache", "tensorfold")
TOOLS = os.path.join(WORK, "worker-tools")
os.makedirs(HOME)
os.makedirs(TOOLS)
os.symlink(FAKE_LDD, os.path.join(TOOLS, "ldd"))
PORT = free_port()

# The checkpoint: the demo one, written by the binary (the same one every test uses).
model_parent = os.path.join(WORK, "models")
demo = subprocess.run([os.path.join(BUILD, "apps", "tensorfold"), "demo-checkpoint", "--out",
                       os.path.join(model_parent, "demo-model")],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
MODEL = os.path.join(model_parent, "demo-model")
check(demo.returncode == 0 and os.path.isfile(os.path.join(MODEL, "config.json")),
      "the demo checkpoint is written for MODEL_DIR: %s" % demo.stdout[-300:])

ENV = dict(os.environ, WORKER="tester@localhost", TF_SSH=FAKE_SSH, FAKE_SSH_HOME=HOME, FAKE_SSH_PATH=TOOLS,
           BUILD_DIR=BUILD, LOG_DIR=os.path.join(WORK, "logs"), STATE_DIR=os.path.join(WORK, "run"),
           PORT=str(PORT), CONTEXT="1024", PARALLEL="2", KV_POOL_GIB="0.05", MEMORY_RESERVE_GIB="0", DENSE="f32",
           MODEL_DIR=MODEL, PREPARE="0", WAIT_TIMEOUT="200", STOP_TIMEOUT="10")
for k in ("TP", "WORKER_DIR", "WORKER_MODEL_DIR", "FABRIC_PEER", "API_KEY", "HOST"):
    ENV.pop(k, None)


def run(args, env=None, timeout=400):
    r = subprocess.run(args, cwd=ROOT, env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout


t0 = time.time()

code, out = run([os.path.join(ROOT, "scripts", "sync_workers.sh")])
check(code == 0, "sync_workers.sh succeeds (exit %d)" % code)
check(os.path.isfile(os.path.join(WORKER_DIR, "tensorfold")), "the binary is in the worker's folder")
spdlog = [f for f in os.listdir(os.path.join(WORKER_DIR, "lib")) if f.startswith("libspdlog.so")] \
    if os.path.isdir(os.path.join(WORKER_DIR, "lib")) else []
check(len(spdlog) == 1, "the library the worker lacked was copied (%s)" % spdlog)
check("copying 1 libraries it lacks: libspdlog.so" in out and "every library found (2)" in out,
      "... and only that one, after which the worker finds every library")
copied = os.path.join(WORKER_DIR, "models", "demo-model")
check(sorted(os.listdir(copied)) == sorted(os.listdir(MODEL)) if os.path.isdir(copied) else False,
      "the checkpoint was copied to WORKER_DIR/models/demo-model")
check("GiB of memory available" in out, "the worker's free memory is shown")
if failures:
    print(out, file=sys.stderr)

code, out = run([os.path.join(ROOT, "start.sh")])
check(code == 0 and "is now LIVE! on port %d" % PORT in out, "start.sh with a worker goes LIVE (exit %d)" % code)
check("rank 1: tester@localhost (GPU 0)" in out, "rank 0 started rank 1 on the worker")
pid_file = os.path.join(WORKER_DIR, "rank1.pid")
remote = int(open(pid_file).read()) if os.path.isfile(pid_file) else None
if code == 0:
    body = json.dumps({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % PORT, data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        usage = json.loads(r.read())["usage"]
    check(usage["completion_tokens"] == 6, "a chat completion over both ranks (%s)" % usage)
else:
    print(out, file=sys.stderr)

code, out = run([os.path.join(ROOT, "stop.sh")])
check(code == 0 and "tensorfold stopped" in out, "stop.sh stops rank 0 (exit %d)" % code)
# (A zombie counts as gone: its parent, not the rank, decides when it is reaped.)
check(remote is not None and wait_gone([remote], 30), "the rank on the worker is gone too")

# A rank left behind on the worker (its rank 0 gone): stop.sh ends it through its pid file.
stray = subprocess.Popen([os.path.join(WORKER_DIR, "tensorfold"), "serve", "--tp", "2", "--rank", "1",
                          "--rendezvous", "127.0.0.1:%d" % free_port(), "--tp-timeout", "300"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open(pid_file, "w") as f:
    f.write(str(stray.pid))
time.sleep(0.5)
code, out = run([os.path.join(ROOT, "stop.sh")])
try:
    stray.wait(15)
except subprocess.TimeoutExpired:
    stray.kill()
check(stray.returncode is not None and stray.returncode < 0 and "rank1 (pid %d) stopped" % stray.pid in out,
      "stop.sh ends a rank left on the worker (%s): %s" % (stray.returncode, out.strip()[-200:]))

# What the user must fix is said.
for extra, pattern, what in [
        ({"FAKE_SSH_REFUSE": "1"}, "ssh-copy-id tester@localhost", "a worker that refuses the login"),
        ({"WORKER_MODEL_DIR": "/nowhere/model"}, "WORKER_MODEL_DIR=/nowhere/model has no config.json on",
         "WORKER_MODEL_DIR without a checkpoint"),
        ({"WORKER": "tester@localhost,-oProxyCommand=x"}, "is not an SSH destination", "an option as WORKER")]:
    code, out = run([os.path.join(ROOT, "scripts", "sync_workers.sh")], env=dict(ENV, **extra), timeout=120)
    check(code != 0 and pattern in out, "%s: sync_workers.sh fails saying so (exit %d): %s"
          % (what, code, out.strip()[-300:]))

check.finish("start_workers", t0)
