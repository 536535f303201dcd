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
Lines start with "[exl3-sass]". flat_*ILi4ELi1ELi5248E is the flat MoE's default loop (exl3_stream.cuh run_v2
with 16-tile ring stages and word hashes, no register cap), flat_*ILi4ELi1ELi<N>E the flat kernels with other
Mode flags (see PATTERNS) for before/after.
NOPs are not counted as issue slots (they are printed apart: the compiler spaces dependent HMMAs with them).
"""
import argparse
import re
import shutil
import subprocess
import sys

PATTERNS = [r"flat_gate_up_kernelILi4ELi1ELi5248E", r"flat_down_kernelILi4ELi1ELi5248E",
            # Mode flags (exl3_stream.cuh): 16 = FMA-pipe pack, 32 = 8-tile stages, 64 = doubled states,
            # 128 = 16-tile stages; 0 = the session-7 loop (flat-prev); session 10: 256 / 512 = 2 / 4
            # interleaved columns, 1024 = word hashes, 4096 = no 64-register cap (5248 = 16-tile stages +
            # word hashes uncapped, the default since run6s10; 1152 = the same capped, 128 the
            # session-8/9 default, 1408 / 5504 = 2 interleaved columns + word hashes capped / uncapped)
            r"flat_gate_up_kernelILi4ELi1ELi1152E", r"flat_gate_up_kernelILi4ELi1ELi128E",
            r"flat_gate_up_kernelILi4ELi1ELi0E", r"flat_gate_up_kernelILi4ELi1ELi1408E",
            r"flat_gate_up_kernelILi4ELi1ELi5504E", r"grouped_gemv_kernelILi4ELi1ELi1E"]
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


def inner_loops(ins):
    """Every innermost loop holding HMMAs (no smaller such loop inside), as (start, end, body).
    An interleaving kernel has two: its run_v2 fallback and run_interleaved (the one it runs)."""
    loops = []
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
        if any(opcode(t).startswith("HMMA") for t in body):
            loops.append((target, addr, body))
    return [l for l in loops
            if not any(o is not l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--clock-mhz", type=float, default=1980.0)
    ap.add_argument("--hbm-gbps", type=float, default=4170.0)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--sass-file", help="read this cuobjdump -sass text instead of disassembling the binary")
    args = ap.parse_args()
    if args.sass_file:
        with open(args.sass_file) as f:
            sass = f.read()
    else:
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
        loops = inner_loops(funcs[name])
        if not loops:
            print(f"[exl3-sass] {pat}: no loop with HMMA found ({len(funcs[name])} instructions)")
            continue
        for start, end, loop in loops:
            report(f"{pat} [{start:#x}-{end:#x}]", loop, args, hbm_weights)
    return 0


def report(pat, loop, args, hbm_weights):
    ops = [opcode(t) for t in loop if opcode(t) != "NOP"]
    nops = sum(opcode(t) == "NOP" for t in loop)  # issued too (the compiler's HMMA spacing)
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
          f", nop {per(nops):.1f} -> {cycles:.1f} scheduler cycles/tile = {len(ops) * 32 / tiles / 256:.2f} "
          f"lane-instr/weight")
    print(f"[exl3-sass] {pat}: ALU bound {wps:.3g} weights/s = {100 * wps / hbm_weights:.0f}% of the HBM rate "
          f"({hbm_weights:.3g} 4-bit weights/s at {args.hbm_gbps:.0f} GB/s, {args.clock_mhz:.0f} MHz)")
    print("[exl3-sass] " + pat + ": " + " ".join(f"{k}:{v}" for k, v in sorted(hist.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    sys.exit(main())
