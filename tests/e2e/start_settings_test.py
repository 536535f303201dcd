#!/usr/bin/env python3
"""start.sh's settings (scripts/config.sh): the speculative-decoding knobs reach `tensorfold serve`
as flags, the environment wins over .env, and bad values stop before anything starts with a
message naming the setting.

Usage: start_settings_test.py REPO_ROOT WORK_DIR
"""
import os
import shutil
import subprocess
import sys

root, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
# A copy of the scripts under a folder of our own, so that a .env can sit beside them.
os.makedirs(os.path.join(work, "scripts"))
shutil.copy(os.path.join(root, "scripts", "config.sh"), os.path.join(work, "scripts", "config.sh"))
failures = []


def settings(env_extra, dotenv=None):
    env = {k: v for k, v in os.environ.items() if k not in ("COPY", "COPY_MAX", "COPY_MATCH", "DRAFTER", "MTP_MAX")}
    env.update(env_extra)
    dot = os.path.join(work, ".env")
    if dotenv is None:
        if os.path.exists(dot):
            os.remove(dot)
    else:
        with open(dot, "w") as f:
            f.write(dotenv)
    script = ('source "%s/scripts/config.sh" && tf_validate_settings && tf_serve_args && '
              'printf "%%s\\n" "${TF_SERVE_ARGS[@]}"' % work)
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)


def check(name, ok, detail):
    print(("ok   " if ok else "FAIL ") + name)
    if not ok:
        failures.append(name + ": " + detail)


r = settings({"DRAFTER": "none", "MTP_MAX": "5", "COPY": "0"})
args = r.stdout.split("\n")
check("DRAFTER, MTP_MAX and COPY become serve flags", r.returncode == 0 and "--drafter" in args and
      args[args.index("--drafter") + 1] == "none" and args[args.index("--mtp-max") + 1] == "5" and
      args[args.index("--copy") + 1] == "0", r.stdout + r.stderr)

r = settings({}, dotenv="DRAFTER=mtp\nMTP_MAX=2  # a comment\n")
args = r.stdout.split("\n")
check(".env settings reach serve", r.returncode == 0 and args[args.index("--drafter") + 1] == "mtp" and
      args[args.index("--mtp-max") + 1] == "2", r.stdout + r.stderr)

r = settings({"MTP_MAX": "7"}, dotenv="MTP_MAX=2\n")
args = r.stdout.split("\n")
check("the environment wins over .env", r.returncode == 0 and args[args.index("--mtp-max") + 1] == "7",
      r.stdout + r.stderr)

r = settings({"MEMORY_GUARD_MIB": "2048", "WATCHDOG_S": "600", "REASONING_EFFORT": "high", "THINKING_BUDGET": "4096"})
args = r.stdout.split("\n")
check("MEMORY_GUARD_MIB, WATCHDOG_S, REASONING_EFFORT and THINKING_BUDGET become serve flags",
      r.returncode == 0 and "--memory-guard-mib" in args and args[args.index("--memory-guard-mib") + 1] == "2048" and
      args[args.index("--watchdog-s") + 1] == "600" and args[args.index("--reasoning-effort") + 1] == "high" and
      args[args.index("--thinking-budget") + 1] == "4096", r.stdout + r.stderr)

r = settings({"STREAM_SMOOTH": "0", "STREAM_SMOOTH_MS": "250"})
args = r.stdout.split("\n")
check("STREAM_SMOOTH=0 turns smooth streaming off, whatever STREAM_SMOOTH_MS says",
      r.returncode == 0 and args[args.index("--stream-smooth-ms") + 1] == "0", r.stdout + r.stderr)
r = settings({"STREAM_SMOOTH_MS": "250"})
args = r.stdout.split("\n")
check("STREAM_SMOOTH_MS becomes --stream-smooth-ms", r.returncode == 0 and
      args[args.index("--stream-smooth-ms") + 1] == "250", r.stdout + r.stderr)

r = settings({"REPLY_WARMUP": "0", "REASONING_MEMORY_MIB": "128"})
args = r.stdout.split("\n")
check("REPLY_WARMUP and REASONING_MEMORY_MIB become serve flags", r.returncode == 0 and
      args[args.index("--reply-warmup") + 1] == "0" and args[args.index("--reasoning-memory-mib") + 1] == "128",
      r.stdout + r.stderr)

for value in ("http://localhost:3000,https://app.example", ""):
    r = settings({"CORS_ORIGINS": value})
    args = r.stdout.split("\n")
    check("CORS_ORIGINS=%r becomes --cors-origins (empty: CORS off)" % value, r.returncode == 0 and
          "--cors-origins" in args and args[args.index("--cors-origins") + 1] == value, r.stdout + r.stderr)
r = settings({})
check("CORS_ORIGINS unset leaves serve's default (*)", r.returncode == 0 and "--cors-origins" not in r.stdout.split("\n"),
      r.stdout + r.stderr)

r = settings({})
args = r.stdout.split("\n")
check("DEVICE defaults to auto (the GPU when the build and the GPU allow)", r.returncode == 0 and
      args[args.index("--device") + 1] == "auto", r.stdout + r.stderr)
for device in ("cpu", "cuda"):
    r = settings({"DEVICE": device})
    args = r.stdout.split("\n")
    check("DEVICE=%s becomes --device %s" % (device, device), r.returncode == 0 and
          args[args.index("--device") + 1] == device, r.stdout + r.stderr)

r = settings({"BATCH_INVARIANT": "0", "EXACT_ROWS": "16"})
args = r.stdout.split("\n")
check("BATCH_INVARIANT and EXACT_ROWS become serve flags", r.returncode == 0 and
      args[args.index("--batch-invariant") + 1] == "0" and args[args.index("--exact-rows") + 1] == "16",
      r.stdout + r.stderr)
r = settings({"BATCH_INVARIANT": "yes"})
check("a BATCH_INVARIANT other than 0 or 1 is refused, naming it", r.returncode != 0 and "BATCH_INVARIANT" in r.stderr,
      r.stdout + r.stderr)

r = settings({})
check("unset knobs leave serve's defaults", r.returncode == 0 and "--drafter" not in r.stdout.split("\n") and
      "--stream-smooth-ms" not in r.stdout.split("\n") and "--reply-warmup" not in r.stdout.split("\n") and
      "--mtp-max" not in r.stdout.split("\n"), r.stdout + r.stderr)

for key, value in (("DRAFTER", "eagle"), ("DRAFTER", "mtp;rm"), ("MTP_MAX", "0"), ("MTP_MAX", "64"),
                   ("MTP_MAX", "three"), ("COPY_MAX", "99"), ("COPY", "yes"), ("LOG_KEEP", "0"),
                   ("LOG_KEEP", "ten"), ("MEMORY_GUARD_MIB", "-1"), ("MEMORY_GUARD_MIB", "1g"),
                   ("WATCHDOG_S", "5m"), ("REASONING_EFFORT", "medium"), ("THINKING_BUDGET", "lots"),
                   ("STREAM_SMOOTH", "yes"), ("STREAM_SMOOTH_MS", "9000"), ("STREAM_SMOOTH_MS", "-5"),
                   ("REPLY_WARMUP", "yes"), ("REASONING_MEMORY_MIB", "64m"), ("REASONING_MEMORY_MIB", "-1"),
                   ("DEVICE", "gpu")):
    r = settings({key: value})
    check("%s=%s is refused, naming it" % (key, value), r.returncode != 0 and key in r.stderr and
          "--" not in r.stdout, "rc %d, stdout %r, stderr %r" % (r.returncode, r.stdout, r.stderr))

# LOG_KEEP: the newest logs kept, all but the current one gzipped, older ones deleted; other files
# in LOG_DIR are left alone.
import gzip
logs = os.path.join(work, "logs")
os.makedirs(logs)
names = ["tensorfold-202612%02d-101500.log" % d for d in range(1, 14)]
for i, n in enumerate(names):
    with open(os.path.join(logs, n), "w") as f:
        f.write("run %d\n" % i)
os.rename(os.path.join(logs, names[5]), os.path.join(logs, names[5] + ".tmp"))
with gzip.open(os.path.join(logs, names[5] + ".gz"), "wt") as f:  # gzipped by an earlier start
    f.write("run 5\n")
os.remove(os.path.join(logs, names[5] + ".tmp"))
for other in ("notes.txt", "tensorfold.log"):
    with open(os.path.join(logs, other), "w") as f:
        f.write("keep\n")
env = dict(os.environ, LOG_DIR=logs, LOG_KEEP="4")
current = os.path.join(logs, names[-1])
r = subprocess.run(["bash", "-c", 'source "%s/scripts/config.sh" && tf_validate_settings && tf_rotate_logs "%s"'
                    % (work, current)], env=env, capture_output=True, text=True, timeout=60)
left = sorted(os.listdir(logs))
want = sorted([names[-1]] + [n + ".gz" for n in names[-4:-1]] + ["notes.txt", "tensorfold.log"])
check("LOG_KEEP=4 keeps the newest 4 logs, the older 3 of them gzipped", r.returncode == 0 and left == want,
      "rc %d %s: %s" % (r.returncode, r.stderr, left))
if r.returncode == 0 and left == want:
    with gzip.open(os.path.join(logs, names[-2] + ".gz"), "rt") as f:
        check("a gzipped log reads back", f.read() == "run 11\n", "")

if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
print("start settings: all checks passed")
