#!/usr/bin/env python3
"""The guards of the real `tensorfold serve` (demo checkpoint).
MEMORY_GUARD_MIB: the server runs while the host has memory, and stops by itself (exit code 3, a log line
naming the setting and the numbers) once the host's available memory stays under the guard; a dip shorter
than the guard's checks does not stop it. The host's memory is read from a file in /proc/meminfo's format that
the test rewrites (TF_MEMINFO).
WATCHDOG_S: a server whose limit is shorter than its steps exits with code 4 while it decodes, saying why.

Usage: serve_guards_test.py TENSORFOLD WORK_DIR
"""
import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from serve_process import Checks, ServeProcess  # noqa: E402

binary, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
meminfo = os.path.join(work, "meminfo")
check = Checks()
t0 = time.time()


def real_available_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def set_available(kb):
    """Rewritten whole, then renamed: the guard never reads half a file."""
    with open(meminfo + ".tmp", "w") as f:
        f.write("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\n" % (kb * 2, kb, kb))
    os.replace(meminfo + ".tmp", meminfo)


set_available(real_available_kb())
env = dict(os.environ, TF_MEMINFO=meminfo, MEMORY_GUARD_MIB="1024")
for k in ("API_KEY", "API_KEY_FILE", "MODEL_DIR", "WORKER"):
    env.pop(k, None)
server = ServeProcess([binary, "serve", "--host", "127.0.0.1", "--port", "0", "--context", "1024",
                       "--cache-dir", os.path.join(work, "cache")], env=env)
try:
    reply, n = server.chat("Is there memory?", 4)
    check(n == 4, "the server answers while the host has memory")
    # A dip of one reading (the guard wants ~1 s of them in a row) does not stop it.
    set_available(300 * 1024)
    time.sleep(0.12)
    set_available(real_available_kb())
    time.sleep(1.5)
    check(server.proc.poll() is None, "a short dip under the guard leaves the server running")
    _, n = server.chat("Still there?", 2)
    check(n == 2, "and answering")
    set_available(600 * 1024)  # 600 MiB, under the guard's 1024
    code = server.wait(20)
    check(code == 3, "under the guard for good: the server stops with exit code 3 (got %r)" % code)
    log = server.log(40)
    check("600 MiB of memory available, under MEMORY_GUARD_MIB (1024 MiB)" in log,
          "its log names the reading and the setting:\n" + log[-600:])
finally:
    server.kill()

# WATCHDOG_S 0.001 s: every step is longer; the watchdog looks once a second.
env.pop("TF_MEMINFO")
server = ServeProcess([binary, "serve", "--host", "127.0.0.1", "--port", "0", "--context", "1024", "--watchdog-s",
                       "0.001", "--cache-dir", os.path.join(work, "cache")], env=env)
try:
    # The watchdog trips only if one of its looks finds a step in flight, so the server is kept stepping (two
    # streams, a request after another) until it exits; a single reply could end between two looks on a busy host.
    deadline = time.time() + 60

    def keep_busy():
        while server.proc.poll() is None and time.time() < deadline:
            try:
                server.chat("Go on for a while.", 900)
            except Exception:  # the connection closes when the process exits
                pass

    busy = [threading.Thread(target=keep_busy) for _ in range(2)]
    for t in busy:
        t.start()
    code = server.wait(60)
    for t in busy:
        t.join()
    check(code == 4, "a step past WATCHDOG_S: the server exits with code 4 (got %r)" % code)
    log = server.log(40)
    check("more than WATCHDOG_S (0 s)" in log and "can be restarted" in log, "its log says why:\n" + log[-600:])
finally:
    server.kill()

check.finish("serve_guards", t0)
