#!/usr/bin/env python3
"""TF_CUDA_GENCODE=auto (cmake/cuda_gencode.cmake): the -gencode flags picked from the
compute capabilities nvidia-smi reports, run against stand-in nvidia-smi programs."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "tools" / "print_gencode.cmake"
CMAKE = shutil.which("cmake") or "cmake"


def detect(smi_output, smi_rc=0, with_smi=True):
    with tempfile.TemporaryDirectory() as d:
        if with_smi:
            smi = pathlib.Path(d) / "nvidia-smi"
            smi.write_text("#!/bin/sh\nprintf '%s'\nexit %d\n" % (smi_output.replace("\n", "\\n"), smi_rc))
            smi.chmod(0o755)
        # Only the stand-in on PATH: the machine's own nvidia-smi never answers.
        env = dict(os.environ, PATH=d)
        r = subprocess.run([CMAKE, "-P", str(SCRIPT)], env=env, capture_output=True, text=True)
        out = r.stdout + r.stderr
        if r.returncode != 0:
            return None, out
        line = [l for l in out.splitlines() if "gencode=[" in l][0]
        return line.split("gencode=[", 1)[1].rstrip("]"), out


def check(name, got, want):
    if got != want:
        print(f"FAIL {name}: got {got!r}, want {want!r}")
        return False
    print(f"ok   {name}: {got}")
    return True


def main():
    ok = True
    h100 = "-gencode=arch=compute_90a,code=sm_90a"
    spark = "-gencode=arch=compute_121,code=sm_121"
    ok &= check("H100 / H200 (9.0) -> sm_90a", detect("9.0\n")[0], h100)
    ok &= check("two DGX Spark GPUs (12.1, twice) -> one sm_121", detect("12.1\n12.1\n")[0], spark)
    ok &= check("B200 (10.0) -> sm_100", detect("10.0\n")[0], "-gencode=arch=compute_100,code=sm_100")
    ok &= check("mixed 9.0 + 12.0 -> both", detect("9.0\n12.0\n")[0],
                h100 + " -gencode=arch=compute_120,code=sm_120")
    ok &= check("no nvidia-smi (a build host, CI) -> sm_90a", detect("", with_smi=False)[0], h100)
    ok &= check("nvidia-smi fails (no driver) -> sm_90a", detect("", smi_rc=9)[0], h100)
    got, out = detect("8.0\n")
    ok &= check("A100 (8.0) refused", got, None)
    if "9.0 or newer" not in out or "8.0" not in out:
        print("FAIL A100 (8.0): the error does not name the need and the GPU's capability:\n" + out)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
