#!/usr/bin/env python3
"""Checks that includes between src/ folders point downward only (docs/architecture.md).

Exits non-zero and names each offending include."""
import os, re, sys

ALLOWED = {
    "core": set(),
    "kernels/api": {"core"},
    "kernels/cpu": {"kernels/api", "core"},
    "kernels/cuda": {"kernels/api", "core"},
    "comm": {"core"},
    "model": {"kernels/api", "comm", "core"},
    "cache": {"core"},
    "text": {"core"},
    "sampling": {"kernels/api", "text", "core"},
    "spec": {"sampling", "cache", "kernels/api", "text", "core"},
    "media": {"core"},
    "engine": {"spec", "sampling", "cache", "text", "media", "model", "comm", "kernels/api", "kernels/cpu",
               "kernels/cuda", "core"},
    "server": {"engine", "text", "core"},
    "bench": {"engine", "server", "core"},
    "check": {"bench", "core"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def folder_of(rel):
    for f in sorted(ALLOWED, key=len, reverse=True):
        if rel == f or rel.startswith(f + "/"):
            return f
    return None


def main(root):
    src = os.path.join(root, "src")
    bad = []
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith((".h", ".cc", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            mine = folder_of(os.path.relpath(path, src))
            if mine is None:
                bad.append(f"{path}: folder not in the layering table")
                continue
            for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                theirs = folder_of(m.group(1))
                if theirs is None or theirs == mine:
                    continue
                if theirs not in ALLOWED[mine]:
                    bad.append(f"{path}:{n}: {mine} must not include {m.group(1)} ({theirs})")
    for b in bad:
        print(b)
    print(f"layering: {len(bad)} violation(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
