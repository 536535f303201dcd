#!/usr/bin/env python3
"""scripts/device/kernel_timeline.py on a synthetic trace whose answer is known: step span, busy and idle
time, each kernel's own time when kernels overlap (a PDL launch waiting for its predecessor is charged to
the one that started first), the gap before each kernel, the steady-step filter (and --kinds / --records, a
batch's steps), and the name shortening."""
import csv
import importlib.util
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "device", "kernel_timeline.py")


def load_module():
    spec = importlib.util.spec_from_file_location("kernel_timeline", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_trace(path):
    # Six steps of 100 us, the first one odd (an extra kernel: not a steady step). In each steady step:
    # the marker 0-2 us, A 10-30, B 25-40 (overlaps A: own 10), C 50-60; a graph id on A and B.
    us = 1000
    rows = []
    for s in range(6):
        t0 = s * 100 * us
        rows.append((t0, t0 + 2 * us, 0, "void tf::cuda::(anonymous namespace)::embedding_kernel<__nv_bfloat16>(float*)"))
        rows.append((t0 + 10 * us, t0 + 30 * us, 7, "void tf::cuda::(anonymous namespace)::ring<8; 8>(Args)"))
        rows.append((t0 + 25 * us, t0 + 40 * us, 7, "void tf::cuda::kernel_b<float>(float*; int)"))
        rows.append((t0 + 50 * us, t0 + 60 * us, 0, "memcpy DtoD 64B"))
        if s == 0:
            rows.append((t0 + 70 * us, t0 + 71 * us, 0, "warmup_kernel(int)"))
    rows.append((6 * 100 * us, 6 * 100 * us + 2 * us, 0, "void tf::cuda::(anonymous namespace)::embedding_kernel<x>(y)"))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["start_ns", "end_ns", "graph_id", "graph_node", "correlation", "stream", "grid", "block", "name"])
        for s, e, g, n in rows:
            w.writerow([s, e, g, 0, 0, 7, 1, 32, n])


def main():
    mod = load_module()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    # own_times: A 0-20, B 15-30 (overlap 5: A's), C 40-50; union 40.
    own, busy = mod.own_times([(0, 20, "0", "A"), (15, 30, "0", "B"), (40, 50, "0", "C")])
    check(busy == 40, f"busy {busy} != 40")
    check(dict(own) == {0: 20, 1: 10, 2: 10}, f"own {dict(own)}")
    check(mod.short_name("void tf::cuda::(anonymous namespace)::ring<8; 8>(Args)", 60) == "ring<8; 8>",
          "short_name keeps the first template level")
    check(mod.short_name("void tf::cuda::f<a<b>>(int)", 60) == "f<a>", "short_name drops nested template arguments")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.csv")
        write_trace(path)
        out = subprocess.run([sys.executable, SCRIPT, path, "--skip", "1"], capture_output=True, text=True, check=True).stdout
        lines = out.splitlines()
        check("6 steps, 4 steady ones summed (4 records each)" in lines[0], f"steps line: {lines[0]}")
        check("step span 100.0 us = busy 42.0 us + idle 58.0 us (58.0%)" in lines[1], f"span line: {lines[1]}")
        table = {}
        for line in lines[3:]:
            parts = line.split()
            table[" ".join(parts[:-6])] = [float(v.rstrip("%")) for v in parts[-6:]]
        # calls, own us, share, mean, dur us, gap us
        check(table.get("ring<8; 8>") == [1.0, 20.0, 20.0, 20.0, 20.0, 8.0], f"ring row {table.get('ring<8; 8>')}")
        check(table.get("kernel_b<float>") == [1.0, 10.0, 10.0, 10.0, 15.0, 0.0], f"b row {table.get('kernel_b<float>')}")
        check(table.get("memcpy DtoD 64B") == [1.0, 10.0, 10.0, 10.0, 10.0, 10.0], f"copy row {table.get('memcpy DtoD 64B')}")
        check("warmup_kernel" not in out, "the odd first step is not summed")
        shown = subprocess.run([sys.executable, SCRIPT, path, "--skip", "1", "--show-step", "0"], capture_output=True,
                               text=True, check=True).stdout.splitlines()
        check(len(shown) == 5 and shown[2].split()[:3] == ["10.00", "20.00", "8.00"], f"show-step: {shown[:3]}")
        # --kinds: 5 steps of 4 records, 1 of 5 (both spans 100 us); --records 5 sums the odd step alone.
        kinds = subprocess.run([sys.executable, SCRIPT, path, "--kinds"], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        check([k.split() for k in kinds[1:]] == [["4", "5", "100.0"], ["5", "1", "100.0"]], f"kinds: {kinds}")
        odd = subprocess.run([sys.executable, SCRIPT, path, "--skip", "0", "--records", "5"], capture_output=True,
                             text=True, check=True).stdout
        check("6 steps, 1 steady ones summed (5 records each)" in odd and "warmup_kernel" in odd,
              f"--records 5: {odd.splitlines()[:1]}")

    if failures:
        print("\n".join("FAIL: " + f for f in failures))
        return 1
    print("kernel_timeline: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
