#!/usr/bin/env python3
"""Cuts the EXL3 decoder ground truth down to a test fixture (tests/data/exl3/).

Input: /work/shared/data/exl3/exl3_reference.safetensors (12 MB), produced by
exllamav3's own CUDA decoder (v1.4.1) on an H200; its README says what each
tensor is. Output: exl3_cases.safetensors (under 3 MB) holding, for every case,
everything needed to decode and to run the layer (trellis, suh, svh, x, y), the
reference states and W_hat of the first tile row (16 rows of W_hat) for
readable diffs, and in the metadata an FNV-1a 64 hash of the *whole*
reference states and W_hat tensors, so the decoder is still pinned bit for bit
on every tile. The three 65536-entry codebook tables are copied whole.

Pure Python (no numpy); run: tools/reference/make_exl3_fixture.py [SRC] [DST_DIR]
"""
import json
import os
import struct
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/data/exl3/exl3_reference.safetensors"
DST = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "../../tests/data/exl3")

DTYPE_SIZE = {"F16": 2, "I16": 2, "F32": 4, "I32": 4}


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        b, en = e["data_offsets"]
        tensors[name] = (e["dtype"], e["shape"], data[b:en])
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    src, src_meta = read_safetensors(SRC)
    ref = json.loads(src_meta["meta"])
    out, cases = {}, []
    for cb in ("3inst", "mcg", "mul1"):
        out["codebook." + cb] = src["codebook." + cb]
    for case in ref["cases"]:
        key, k, n = case["key"], case["k"], case["n"]
        for part in ("trellis", "suh", "svh", "x", "y"):
            out[key + "." + part] = src[key + "." + part]
        dt, shape, states = src[key + ".states"]
        assert shape == [k // 16, n // 16, 256] and dt == "I16"
        row_bytes = (n // 16) * 256 * 2
        out[key + ".states_row0"] = ("I16", [1, n // 16, 256], states[:row_bytes])
        dt, shape, w_hat = src[key + ".w_hat"]
        assert shape == [k, n] and dt == "F16"
        out[key + ".w_hat_rows16"] = ("F16", [16, n], w_hat[: 16 * n * 2])
        cases.append({"key": key, "k": k, "n": n, "K": case["K"], "codebook": case["codebook"],
                      "states_fnv1a64": fnv1a64(states), "w_hat_fnv1a64": fnv1a64(w_hat)})
    meta = {"source": ref["source"], "from": os.path.basename(SRC), "hash": "FNV-1a 64 over the little-endian bytes",
            "cases": cases}
    os.makedirs(DST, exist_ok=True)
    path = os.path.join(DST, "exl3_cases.safetensors")
    write_safetensors(path, out, {"meta": json.dumps(meta)})
    print(path, os.path.getsize(path), "bytes,", len(cases), "cases")


if __name__ == "__main__":
    main()
