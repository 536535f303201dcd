#!/usr/bin/env python3
"""`tensorfold serve --worker user@host`: a rank on another machine, started over SSH (system.md: WORKER).

The "other machine" is this one through tests/tools/fake_ssh.sh (TF_SSH): it runs the remote command in a
home folder of its own with a login's environment, not rank 0's, as ssh would. The worker's folder holds only
the tensorfold binary (as scripts/prepare.sh leaves it); the worker makes its own demo checkpoint there.

- greedy replies (text and image, alone and together) equal `--tp 1`'s; the settings rank 0 read from its
  environment (DENSE=f32) reach the worker, else its shard would be q4 and the replies differ;
- SSH was asked for the destination given, the rank wrote its pid file in the worker's folder, and leaves
  when rank 0 stops (exit 0);
- the rank on the worker dying (SIGKILL through its pid file) makes rank 0 exit non-zero, naming the rank;
- a worker folder without tensorfold: rank 0 exits non-zero and its log says what is missing where;
- options that cannot work are refused before anything starts: --tp smaller than 1 + workers, a destination
  that is an ssh option;
- three workers (four ranks, one destination named twice: its ranks take GPUs 0 and 1) give --tp 1's replies.

Usage: serve_workers_test.py TENSORFOLD_BINARY FAKE_SSH WORK_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from serve_process import (START_TIMEOUT, Checks, ServeProcess, chats_together, pid_alive,  # noqa: E402
                           wait_gone)

BIN, FAKE_SSH, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
check = Checks()
failures = check.failures

shutil.rmtree(WORK, ignore_errors=True)
HOME = os.path.join(WORK, "worker-home")
WORKER_DIR = os.path.join(HOME, ".cache", "tensorfold")
os.makedirs(WORKER_DIR)
os.symlink(BIN, os.path.join(WORKER_DIR, "tensorfold"))
SSH_LOG = os.path.join(WORK, "ssh.log")
HEAD_CACHE = os.path.join(WORK, "head-cache")


class Server(ServeProcess):
    def __init__(self, extra, env_extra=None, expect_listen=True):
        super().__init__([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--context", "1024", "--parallel", "2",
                          "--kv-pool-gib", "0.05", "--memory-reserve-gib", "0", "--cache-dir", HEAD_CACHE] + list(extra),
                         env=dict(os.environ, TF_SSH=FAKE_SSH, FAKE_SSH_HOME=HOME, FAKE_SSH_LOG=SSH_LOG,
                                  **(env_extra or {})),
                         wait=expect_listen)


def remote_pid():
    """The pid the rank on the worker wrote (the shell that exec'd tensorfold)."""
    path = os.path.join(WORKER_DIR, "rank1.pid")
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text)
        except OSError:
            pass
        time.sleep(0.05)
    return None


PROMPTS = [("Tell me about the lighthouse keeper and the storm.", 16), ("Hi there", 10)]


def replies(server):
    alone = server.chat(*PROMPTS[0])
    return alone, chats_together(server, PROMPTS)


t0 = time.time()

# Refused before anything starts.
for extra, pattern, what in [
        (["--tp", "2", "--worker", "a@x,b@y"], r"--tp must be at least 3", "--tp 2 with two workers"),
        (["--worker", "-oProxyCommand=touch /tmp/x"], r"is not an SSH destination", "a destination that is an option")]:
    r = subprocess.run([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--cache-dir", HEAD_CACHE] + extra,
                       env=dict(os.environ, TF_SSH=FAKE_SSH, FAKE_SSH_HOME=HOME), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=START_TIMEOUT)
    check(r.returncode != 0 and "listening" not in r.stdout and re.search(pattern, r.stdout) is not None,
          "%s is refused (exit %d): %s" % (what, r.returncode, r.stdout.strip()[-300:]))

one = Server(["--dense", "f32"])
try:
    ref = replies(one)
finally:
    one.proc.send_signal(signal.SIGTERM)
    check(one.wait(30) == 0, "--tp 1 stops on SIGTERM with exit code 0")

two = Server(["--worker", "tester@localhost"], env_extra={"DENSE": "f32"})
try:
    pid = remote_pid()
    check(pid is not None and pid_alive(pid), "the rank on the worker wrote its pid file (%s)" % pid)
    with open(SSH_LOG) as f:
        check(f.read().split() == ["tester@localhost"], "SSH was asked for the destination given")
    check(re.search(r"rank 1: tester@localhost \(GPU 0\)", two.log()) is not None, "rank 0 says where rank 1 runs")
    check(os.path.isdir(os.path.join(WORKER_DIR, "cache")), "the worker made its own demo checkpoint in its folder")
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            environ = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
    except OSError:
        environ = {}
    check(environ.get(b"DENSE") == b"f32" and environ.get(b"TF_CACHE_DIR") == os.path.join(WORKER_DIR, "cache").encode() and b"MODEL_DIR" not in environ,
          "the worker got rank 0's DENSE, its own cache folder and no MODEL_DIR of rank 0's machine (%s)"
          % {k: v for k, v in environ.items() if k in (b"DENSE", b"TF_CACHE_DIR", b"MODEL_DIR")})
    got = replies(two)
    check(got == ref, "replies with a rank on a worker equal --tp 1's:\n  worker %r\n  tp1    %r" % (got, ref))
    two.proc.send_signal(signal.SIGTERM)
    check(two.wait(30) == 0, "rank 0 stops on SIGTERM with exit code 0")
    try:
        worker_log = open(os.path.join(WORKER_DIR, "logs", "rank1.log")).read()
    except OSError as e:
        worker_log = str(e)
    check("[rank 1] info rank 1 of 2: loaded its shard" in worker_log and "rank 0 stopped" in worker_log,
          "the worker keeps its rank's own log (WORKER_DIR/logs/rank1.log): %s" % worker_log[-300:])
    check(pid is not None and wait_gone([pid], 10), "the rank on the worker left with rank 0")
finally:
    two.kill()
    if failures:
        print(two.log(), file=sys.stderr)

three = Server(["--worker", "tester@localhost", "--dense", "f32"])
try:
    pid = remote_pid()
    three.chat("Warm up", 2)
    os.kill(pid, signal.SIGKILL)
    code = three.wait(15)
    check(code is not None and code != 0, "rank 0 exits non-zero once the rank on the worker dies (code %s)" % code)
    three.reader.join(5)
    check(re.search(r"rank 1 exited", three.log()) is not None, "rank 0 says which rank exited")
finally:
    three.kill()
    if failures:
        print(three.log(), file=sys.stderr)

four = Server(["--worker", "tester@localhost", "--worker-dir", "nowhere"], expect_listen=False)
try:
    code = four.wait(30)
    four.reader.join(5)
    check(code is not None and code != 0, "a worker without the folder: rank 0 exits non-zero (code %s)" % code)
    check(re.search(r"no folder nowhere on \S+ \(scripts/prepare.sh copies it there\)", four.log()) is not None,
          "... and the log says what is missing where")
finally:
    four.kill()
    if failures:
        print(four.log(), file=sys.stderr)

# Four ranks: three workers, one destination named twice (its second rank takes that machine's GPU 1).
wide = Server(["--worker", "a@localhost,a@localhost", "--worker", "b@localhost", "--dense", "f32"])
try:
    log = wide.log(200)
    check(all(re.search(p, log) for p in (r"rank 1: a@localhost \(GPU 0\)", r"rank 2: a@localhost \(GPU 1\)",
                                            r"rank 3: b@localhost \(GPU 0\)", r"1 rank\(s\) here, 3 on other machines")),
          "--worker a,a --worker b: ranks 1-3 on the workers, GPUs by destination")
    got = replies(wide)
    check(got == ref, "replies with three ranks on workers equal --tp 1's:\n  tp4 %r\n  tp1 %r" % (got, ref))
    check(wide.stop() == 0, "rank 0 of four stops on SIGTERM with exit code 0")
finally:
    wide.kill()
    if failures:
        print(wide.log(), file=sys.stderr)

check.finish("serve_workers", t0)
