#!/usr/bin/env python3
"""Prints the SASS lines of an `ncu --page source --print-source sass --csv` dump with the most
warp-stall samples, and the stall reasons summed over the kernel (prefill_moe.sh PF_NCU).

usage: ncu_top_stalls.py DUMP.csv [N]"""
import csv
import sys


def main() -> int:
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"Address"') or l.startswith('"#"')), None)
    if start is None:
        print("ncu_top_stalls: no SASS table in", path)
        print("\n".join(lines[-15:]))
        return 1
    rows = list(csv.DictReader(lines[start:]))
    if not rows:
        return 1
    cols = list(rows[0].keys())
    samp = next((c for c in cols if c.startswith("Warp Stall Sampling (All")), None)
    src = next((c for c in cols if c == "Source"), cols[1])
    if samp is None:
        print("ncu_top_stalls: columns:", cols)
        return 1

    def num(v: str) -> float:
        try:
            return float(v.replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(num(r[samp]) for r in rows) or 1.0
    print(f"{len(rows)} SASS lines, {total:.0f} stall samples")
    reasons = [c for c in cols if c.startswith("stall_") or "Stall" in c and c != samp and "Sampling" not in c]
    sums = sorted(((sum(num(r[c]) for r in rows), c) for c in reasons), reverse=True)[:12]
    for v, c in sums:
        if v > 0:
            print(f"  {c}: {v:.0f} ({100 * v / total:.1f}%)")
    idx = {id(r): i for i, r in enumerate(rows)}
    for r in sorted(rows, key=lambda r: -num(r[samp]))[:top]:
        print(f"{idx[id(r)]:5d} {100 * num(r[samp]) / total:5.1f}%  {r[src][:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
