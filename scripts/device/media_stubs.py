#!/usr/bin/env python3
"""Writes stand-ins for the FFmpeg libraries a binary links (libavformat, libavcodec, libavutil,
libswscale) into OUTDIR: each exports the binary's versioned symbols of that library, functions
returning 0 and zero-filled objects of the real size. For benchmarks on the GPU machine only:
Debian's FFmpeg chain is ~165 MB, past the device carry's 64 MiB, and `tensorfold bench` never
decodes media. A binary run with these must not be sent an image or a video.

usage: media_stubs.py BINARY OUTDIR   (then pack with OUTDIR first on LD_LIBRARY_PATH)"""
import collections
import os
import re
import subprocess
import sys

SYSLIB = "/lib/x86_64-linux-gnu"


def main() -> int:
    binary, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    undef = subprocess.run(["nm", "-D", "--undefined-only", binary], capture_output=True, text=True, check=True)
    by_version = collections.defaultdict(list)
    for line in undef.stdout.splitlines():
        m = re.search(r"(\S+)@(LIBAV\w+|LIBSW\w+)$", line.strip())
        if m:
            by_version[m.group(2)].append(m.group(1))
    for version, symbols in sorted(by_version.items()):
        # LIBAVUTIL_57 -> libavutil.so.57
        name, major = version.rsplit("_", 1)
        lib = f"{name.lower()}.so.{major}"
        table = subprocess.run(["readelf", "-Ws", "--dyn-syms", os.path.join(SYSLIB, lib)], capture_output=True,
                               text=True, check=True).stdout
        kinds = {}
        for row in table.splitlines():
            f = row.split()
            if len(f) >= 8 and f[3] in ("FUNC", "OBJECT"):
                size = int(f[2], 16) if f[2].startswith("0x") else int(f[2])
                kinds[f[7].split("@")[0]] = (f[3], size)
        src = os.path.join(out, lib + ".c")
        with open(src, "w") as c:
            for s in symbols:
                kind, size = kinds.get(s, ("FUNC", 0))
                c.write(f"char {s}[{max(size, 8)}];\n" if kind == "OBJECT" else f"long {s}(void) {{ return 0; }}\n")
        vmap = os.path.join(out, lib + ".map")
        with open(vmap, "w") as m:
            m.write(f"{version} {{ global: {' '.join(s + ';' for s in symbols)} local: *; }};\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", os.path.join(out, lib), src, f"-Wl,--version-script={vmap}",
                        f"-Wl,-soname,{lib}"], check=True)
        os.remove(src)
        os.remove(vmap)
        print(f"{lib}: {len(symbols)} symbols")
    return 0


if __name__ == "__main__":
    sys.exit(main())
