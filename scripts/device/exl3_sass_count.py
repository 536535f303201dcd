#!/usr/bin/env python3
"""Instruction budget of the EXL3 streaming loop, from the SASS of a packed binary (issue #8).

Run ON the GPU machine (needs cuobjdump from its CUDA toolkit):
    python3 scripts/device/exl3_sass_count.py .gpurun/exl3_cuda_bench [--clock-mhz 1980] [--hbm-gbps 4170]

For every kernel whose name matches the patterns below it finds the innermost loop that holds
the tensor-core MMAs (the smallest backward-branch range containing an HMMA), counts its
instructions by pipe and prints per 16x16 tile (two HMMAs per tile at 1-8 rows):
  issue   = instructions (one per scheduler cycle),
  alu     = integer ALU-pipe ops (16 lanes per scheduler on Hopper: 2 cycles each),
  imad    = IMAD (FMA-heavy pipe only: 2 cycles each), fp = other FMA-pipe ops (1 cycle),
and the resulting ALU bound in weights/s and as a share of the HBM rate of 4-bit weights.
Lines start with "[exl3-sass]". flat_*ILi4ELi1ELi32E is the flat MoE's default loop (exl3_stream.cuh run_v2
with 8-tile ring stages), flat_*ILi4ELi1ELi<0|128|112>E the same loop with other Mode flags (0 = the session-7
4-tile stages, 128 = 16-tile stages, 112 = 8-tile stages + FMA-pipe pack + doubled states) for before/after.
"""
import argparse
import re
import shutil
import subprocess
import sys

PATTERNS = [r"flat_gate_up_kernelILi4ELi1ELi32E", r"flat_down_kernelILi4ELi1ELi32E",
            # Mode flags (exl3_stream.cuh): 16 = FMA-pipe pack, 32 = 8-tile stages (the default since
            # run1s8), 64 = doubled states, 128 = 16-tile stages; 0 = the session-7 loop (flat-prev)
            r"flat_gate_up_kernelILi4ELi1ELi0E", r"flat_gate_up_kernelILi4ELi1ELi128E",
            r"flat_gate_up_kernelILi4ELi1ELi112E", r"grouped_gemv_kernelILi4ELi1ELi1E"]
ALU = {"IADD3", "LOP3", "SHF", "PRMT", "SEL", "ISETP", "LEA", "IMNMX", "FLO", "POPC", "BMSK", "SGXT", "IABS",
       "LEA.HI", "VIADD", "VIMNMX", "PLOP3", "MOV", "SHL", "SHR", "IADD", "ICMP", "BREV", "FSEL", "FSETP", "P2R", "R2P"}
FMA = {"FFMA", "FADD", "FMUL", "HADD2", "HFMA2", "HMUL2", "HMNMX2", "FMNMX", "I2F", "F2I", "F2F", "HSETP2"}
LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def opcode(text):
    t = text.split()
    if t and t[0].startswith("@"):
        t = t[1:]
    return t[0] if t else ""


def parse(sass):
    funcs, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = LINE.search(line)
        if m and cur:
            funcs[cur].append((int(m.group(1), 16), m.group(2)))
    return funcs


def inner_loop(ins):
    best = None
    for i, (addr, text) in enumerate(ins):
        if opcode(text) != "BRA":
            continue
        m = re.search(r"0x([0-9a-f]+)", text.split("BRA", 1)[1])
        if not m:
            continue
        target = int(m.group(1), 16)
        if target > addr:
            continue
        body = [t for a, t in ins if target <= a <= addr]
        if any(opcode(t).startswith("HMMA") for t in body) and (best is None or len(body) < len(best)):
            best = body
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--clock-mhz", type=float, default=1980.0)
    ap.add_argument("--hbm-gbps", type=float, default=4170.0)
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    try:
        sass = subprocess.run([tool, "-sass", args.binary], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"[exl3-sass] cuobjdump unavailable ({e}): no instruction count")
        return 0
    funcs = parse(sass)
    hbm_weights = args.hbm_gbps * 1e9 * 2  # 4-bit weights per second at the HBM rate
    for pat in PATTERNS:
        names = [n for n in funcs if re.search(pat, n)]
        if not names:
            print(f"[exl3-sass] {pat}: not found")
            continue
        name = names[0]
        loop = inner_loop(funcs[name])
        if not loop:
            print(f"[exl3-sass] {pat}: no loop with HMMA found ({len(funcs[name])} instructions)")
            continue
        ops = [opcode(t) for t in loop if opcode(t) != "NOP"]
        hmma = sum(o.startswith("HMMA") for o in ops)
        tiles = hmma / 2.0
        base = lambda o: o.split(".")[0]
        alu = sum(base(o) in ALU for o in ops)
        imad = sum(base(o) == "IMAD" for o in ops)
        fp = sum(base(o) in FMA for o in ops)
        lsu = sum(base(o) in ("LDS", "LDG", "LDGSTS", "STS", "LDSM", "SHFL", "LD", "ST") for o in ops)
        hist = {}
        for o in ops:
            hist[base(o)] = hist.get(base(o), 0) + 1
        per = lambda v: v / tiles
        cycles = max(per(len(ops)), 2 * per(alu), 2 * per(imad) + per(fp))
        wps = args.sms * 4 * args.clock_mhz * 1e6 * 256 / cycles
        print(f"[exl3-sass] {pat}: loop {len(ops)} instr, {hmma} HMMA = {tiles:g} tiles; per tile: issue "
              f"{per(len(ops)):.1f}, alu {per(alu):.1f}, imad {per(imad):.1f}, fp {per(fp):.1f}, lsu {per(lsu):.1f}"
              f" -> {cycles:.1f} scheduler cycles/tile = {len(ops) * 32 / tiles / 256:.2f} lane-instr/weight")
        print(f"[exl3-sass] {pat}: ALU bound {wps:.3g} weights/s = {100 * wps / hbm_weights:.0f}% of the HBM rate "
              f"({hbm_weights:.3g} 4-bit weights/s at {args.hbm_gbps:.0f} GB/s, {args.clock_mhz:.0f} MHz)")
        print("[exl3-sass] " + pat + ": " + " ".join(f"{k}:{v}" for k, v in sorted(hist.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
