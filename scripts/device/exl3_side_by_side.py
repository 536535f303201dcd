#!/usr/bin/env python3
"""EXL3 K=4 GEMV at batch 1: tensorfold's kernel beside exllamav3's own, same shapes, same GPU call.

Run ON the GPU machine from the repo root (scripts/device/exl3_side_by_side.sh does; device
call with carry [".gpurun", ".exl3ref"]). Needs PyTorch (CUDA), nvcc, and:
  .exl3ref/exllamav3_ext/   the headers exllamav3's GEMV kernel needs (util.h, util.cuh,
                            compat.cuh, ptx.cuh, quant/{exl3_gemv_kernel,exl3_dq,codebook,
                            exl3_kernel_map,hadamard_inner}.cuh) copied from
                            turboderp-org/exllamav3 (commit in .exl3ref/COMMIT); git-ignored,
                            never committed;
  .gpurun/exl3_cuda_bench   (scripts/device/pack.sh) for tensorfold's numbers.

Steps: build scripts/device/exl3_side_by_side_ext.cu (a launch shim, only the K=4 kernels) into
a shared library with nvcc; check exllamav3's output against a float32 reference computed here
from an independent torch decode of the trellis (spec: /work/shared/spec/exl3.md section 2-3);
time it from a CUDA graph of many calls over weight copies (>= 512 MB, so L2 cannot serve them),
exactly as exl3_cuda_bench times ours; run `exl3_cuda_bench --sbs`; print both and the ratio.
Lines: "exl3-sbs-ref ..." (exllamav3 correctness), "exl3-sbs ..." (one per shape).
"""
import ctypes
import os
import re
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REF = os.path.join(ROOT, ".exl3ref", "exllamav3_ext")
SHIM = os.path.join(ROOT, "scripts", "device", "exl3_side_by_side_ext.cu")
BENCH = os.path.join(ROOT, ".gpurun", "exl3_cuda_bench")
SHAPES = [(4096, 2048, "gate/up"), (2048, 4096, "down"), (4096, 8192, "wide")]
MCG = 0xCBAC1FED


def nvcc_path():
    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:  # noqa: BLE001 - any import problem: fall back to PATH
        CUDA_HOME = None
    for cand in ([os.path.join(CUDA_HOME, "bin", "nvcc")] if CUDA_HOME else []) + ["/usr/local/cuda/bin/nvcc", "nvcc"]:
        if os.path.sep not in cand or os.path.exists(cand):
            return cand
    return "nvcc"


def build_shim():
    out = os.path.join(tempfile.mkdtemp(prefix="exl3sbs-"), "libexl3sbs.so")
    cmd = [nvcc_path(), "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
           "-diag-suppress", "20012", "-shared", "-Xcompiler", "-fPIC", "-I", REF, "-o", out, SHIM]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("exl3-sbs: building exllamav3's kernel FAILED:\n" + " ".join(cmd) + "\n" + r.stdout + r.stderr)
        sys.exit(1)
    print(f"exl3-sbs: built exllamav3's GEMV kernel (K=4) in {time.time() - t0:.1f} s")
    lib = ctypes.CDLL(out)
    lib.sbs_exl3_gemv_k4.restype = ctypes.c_int
    lib.sbs_exl3_gemv_k4.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_void_p] * 4 + \
        [ctypes.c_int, ctypes.c_void_p]
    return lib


def hadamard128(device):
    h = torch.ones(1, 1, dtype=torch.float32, device=device)
    while h.shape[0] < 128:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / 128 ** 0.5


def decode_w_hat_k4_mcg(trellis):
    """W_hat [k, n] fp16 from an int16 trellis [k/16, n/16, 64] (K = 4, mcg), in torch."""
    tk, tn, _ = trellis.shape
    t = trellis.to(torch.int64) & 0xFFFF
    words = t[..., 0::2] | (t[..., 1::2] << 16)                      # [tk, tn, 32] u32, stream order
    shifts = torch.arange(28, -1, -4, device=t.device)                # nibbles MSB first
    nib = ((words.unsqueeze(-1) >> shifts) & 0xF).reshape(tk, tn, 256)
    # state p = nibbles p-3, p-2, p-1, p (tail-biting, mod 256)
    st = torch.zeros_like(nib)
    for back in range(4):
        st |= torch.roll(nib, shifts=back, dims=-1) << (4 * back)
    x = (st * MCG) & 0xFFFFFFFF
    m = (x & 0x8FFF8FFF) ^ 0x3B603B60

    def as_half(u16):
        return torch.where(u16 >= 32768, u16 - 65536, u16).to(torch.int16).view(torch.float16)

    v = (as_half(m & 0xFFFF).float() + as_half(m >> 16).float()).half()  # one rounding of the exact sum
    p = torch.arange(256, device=t.device)
    lane, j = p // 8, p % 8
    row = 2 * (lane % 4) + (j & 1) + 8 * ((j >> 1) & 1)
    col = lane // 4 + 8 * (j >> 2)
    tiles = torch.zeros(tk, tn, 256, dtype=torch.float16, device=t.device)
    tiles[..., row * 16 + col] = v
    return tiles.reshape(tk, tn, 16, 16).permute(0, 2, 1, 3).reshape(tk * 16, tn * 16)


def reference_y(x, trellis, suh, svh):
    h = hadamard128(x.device)
    xr = ((x.float() * suh.float()).reshape(-1, 128) @ h).reshape(1, -1)
    y1 = xr @ decode_w_hat_k4_mcg(trellis).float()
    return (y1.reshape(-1, 128) @ h).reshape(1, -1) * svh.float()


def graph_time_per_call(calls):
    """Seconds per call of `calls` (list of thunks) captured into one CUDA graph and replayed."""
    for c in calls[:4]:
        c()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    torch.cuda.synchronize()
    reps = 5
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(reps):
        g.replay()
    t1.record()
    t1.synchronize()
    return t0.elapsed_time(t1) / 1e3 / (reps * len(calls))


def run_ours():
    if not os.access(BENCH, os.X_OK):
        print(f"exl3-sbs: {BENCH} missing (scripts/device/pack.sh): tensorfold side skipped")
        return None, {}
    r = subprocess.run([BENCH, "--sbs"], capture_output=True, text=True, timeout=120)
    sys.stdout.write("".join(f"  [tensorfold] {l}\n" for l in r.stdout.splitlines()))
    if r.returncode != 0:
        print("exl3-sbs: exl3_cuda_bench --sbs failed:\n" + r.stderr)
    copy = None
    ours = {}
    for line in r.stdout.splitlines():
        m = re.match(r"measured_copy_gbps\s+([\d.]+)", line)
        if m:
            copy = float(m.group(1))
        f = line.split()
        # exl3-gemv KxN K cb m variant us GB/s %copy (what)
        if len(f) >= 8 and f[0] == "exl3-gemv" and f[2] == "4" and f[3] == "mcg" and f[4] == "1":
            k, n = (int(v) for v in f[1].split("x"))
            ours[(k, n, f[5])] = float(f[6])
    return copy, ours


def main():
    if not torch.cuda.is_available():
        print("exl3-sbs: no CUDA device")
        return 1
    dev = torch.device("cuda")
    print(f"exl3-sbs: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, exllamav3 commit "
          f"{open(os.path.join(ROOT, '.exl3ref', 'COMMIT')).read().strip() if os.path.exists(os.path.join(ROOT, '.exl3ref', 'COMMIT')) else '?'}")
    if not os.path.isdir(REF):
        print(f"exl3-sbs: {REF} missing: carry .exl3ref (see this script's header)")
        return 1
    lib = build_shim()
    locks = torch.zeros(1 << 16, dtype=torch.int32, device=dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    theirs = {}
    ok = True
    for k, n, what in SHAPES:
        bytes_ = k * n * 4 // 8
        copies = max(2, (512 << 20) // bytes_)
        trellis = [torch.randint(-32768, 32768, (k // 16, n // 16, 64), dtype=torch.int16, device=dev, generator=gen)
                   for _ in range(copies)]
        suh = (torch.randn(k, device=dev, generator=gen) * 0.1).half()
        svh = (torch.randn(n, device=dev, generator=gen) * 0.1).half()
        x = torch.randn(1, k, device=dev, generator=gen).half()
        a_had = torch.empty_like(x)
        y = torch.empty(1, n, dtype=torch.float16, device=dev)

        def call(i):
            return lambda: check(lib.sbs_exl3_gemv_k4(x.data_ptr(), trellis[i].data_ptr(), y.data_ptr(), k, n,
                                                      locks.data_ptr(), suh.data_ptr(), a_had.data_ptr(),
                                                      svh.data_ptr(), 1, torch.cuda.current_stream().cuda_stream))

        call(0)()
        torch.cuda.synchronize()
        ref = reference_y(x, trellis[0], suh, svh)
        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        good = err < 2e-2
        ok &= good
        print(f"exl3-sbs-ref {k}x{n}: exllamav3 y vs float32 reference (torch decode): max rel err {err:.3g} "
              f"{'ok' if good else 'MISMATCH'}")
        t = graph_time_per_call([call(i) for i in range(copies)])
        theirs[(k, n)] = t * 1e6
        del trellis
        torch.cuda.empty_cache()
    copy, ours = run_ours()
    print(f"exl3-sbs measured_copy_gbps {copy if copy else float('nan'):.1f}")
    print(f"{'exl3-sbs':8s} {'shape':11s} {'what':8s} {'tf us':>8s} {'tf GB/s':>8s} {'tf %':>6s} "
          f"{'exl3 us':>8s} {'exl3 GB/s':>9s} {'exl3 %':>6s} {'speedup':>8s}")
    for k, n, what in SHAPES:
        bytes_ = k * n * 4 // 8
        tu = ours.get((k, n, "auto"))  # what exl3_matmul does by default
        eu = theirs[(k, n)]
        def pct(us):
            return 100 * bytes_ / (us * 1e-6) / 1e9 / copy if (us and copy) else float("nan")
        print(f"exl3-sbs {k:5d}x{n:<5d} {what:8s} {tu or float('nan'):8.2f} {bytes_ / (tu * 1e-6) / 1e9 if tu else float('nan'):8.1f} "
              f"{pct(tu):5.1f}% {eu:8.2f} {bytes_ / (eu * 1e-6) / 1e9:9.1f} {pct(eu):5.1f}% "
              f"{(eu / tu) if tu else float('nan'):7.2f}x")
    return 0 if ok else 1


def check(err):
    if err != 0:
        raise RuntimeError(f"exllamav3 GEMV launch failed: cudaError {err}")


if __name__ == "__main__":
    sys.exit(main())
