#!/usr/bin/env python3
"""Damaged checkpoints against the real binary: tiny EXL3 and FP8 checkpoints (`synth-checkpoint`) are
mutated (truncated shards, corrupt header bytes and lengths, wrong shapes / dtypes / offsets, tensors
dropped from a header, broken index entries, odd config.json values, flipped data bytes) and loaded by
`tensorfold bench --offline --device cpu`. Each load must end within 60 s with exit code 0 or 1: never a
signal (a crash or an abort) or a hang. A refused load prints one `error:` line naming the model folder's
file or tensor. Targeted cases then check the exact refusals: a NaN in an EXL3 linear's suh, an FP8 scale
of inf, a norm weight of NaN, a foreign quant_method, a malformed weight_block_size.

Usage: checkpoint_mutations_test.py TENSORFOLD WORK_DIR [RUNS_PER_CHECKPOINT]
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

binary, work = sys.argv[1], sys.argv[2]
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 60
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_st(path, header, body):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def edit_json(path, fn):
    with open(path) as f:
        j = json.load(f)
    fn(j)
    with open(path, "w") as f:
        json.dump(j, f)


def shards(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def odd_value(rng):
    return rng.choice([-7, 0, 2**63 - 1, "x", None, 1.5, [1, 2], {"a": 1}, 10**9])


def mutate(d, rng):
    """One random mutation of folder d; returns (kind, data_only): data_only when only tensor bytes changed."""
    f = os.path.join(d, rng.choice(shards(d)))
    kind = rng.choice(["truncate", "header_bytes", "header_length", "shape", "dtype", "offsets", "drop",
                       "config", "quantization_config", "index", "data_bytes"])
    if kind == "truncate":
        os.truncate(f, rng.randrange(os.path.getsize(f)))
    elif kind in ("header_bytes", "header_length", "data_bytes"):
        b = bytearray(open(f, "rb").read())
        n = struct.unpack("<Q", b[:8])[0]
        if kind == "header_length":
            b[:8] = struct.pack("<Q", rng.choice([0, 1, n - 1, len(b), 2**63, 2**64 - 1, rng.randrange(2**40)]))
        else:
            lo, hi = (8, 8 + n) if kind == "header_bytes" else (8 + n, len(b))
            for _ in range(rng.choice([1, 4, 64])):
                b[rng.randrange(lo, hi)] = rng.randrange(256)
        open(f, "wb").write(b)
    elif kind in ("shape", "dtype", "offsets", "drop"):
        header, body = read_st(f)
        name = rng.choice(sorted(k for k in header if k != "__metadata__"))
        t = header[name]
        if kind == "shape":
            s = list(t["shape"])
            c = rng.randrange(4)
            if c == 0 and s:
                s[rng.randrange(len(s))] = rng.choice([0, 1, 3, 2**40])
            elif c == 1:
                s.append(rng.choice([1, 2]))
            elif c == 2 and s:
                s.pop()
            else:
                s = odd_value(rng)
            t["shape"] = s
        elif kind == "dtype":
            t["dtype"] = rng.choice(["F32", "F16", "BF16", "I32", "U8", "I16", "F8_E4M3", "F64", "BOOL", "XX", 5, None])
        elif kind == "offsets":
            o = list(t["data_offsets"])
            t["data_offsets"] = rng.choice([[o[1], o[0]], [o[0], len(body) + 1 + rng.randrange(10**6)],
                                            [o[0] + 2, o[1] + 2], odd_value(rng)])
        else:
            del header[name]
        write_st(f, header, body)
    elif kind == "config":
        def change(c):
            key = rng.choice(sorted(k for k in c if not isinstance(c[k], dict)))
            if rng.random() < 0.3:
                del c[key]
            else:
                c[key] = odd_value(rng)
        edit_json(os.path.join(d, "config.json"), change)
    elif kind == "quantization_config":
        def change(c):
            q = c["quantization_config"]
            q[rng.choice(sorted(q))] = rng.choice([odd_value(rng), 0, 9, 3, "foo", "mcg", "mul1", 16, [128], [64, 64]])
        edit_json(os.path.join(d, "config.json"), change)
    elif kind == "index":
        def change(ix):
            wm = ix["weight_map"]
            key = rng.choice(sorted(wm))
            c = rng.randrange(4)
            if c == 0:
                wm[key] = "missing.safetensors"
            elif c == 1:
                del wm[key]
            elif c == 2:
                wm[key] = "../../outside.safetensors"
            else:
                wm[key] = odd_value(rng)
        edit_json(os.path.join(d, "model.safetensors.index.json"), change)
    return kind, kind == "data_bytes"


def load(d):
    """Runs one offline load + a 2-token decode; returns (exit code or 'timeout', output)."""
    try:
        r = subprocess.run([binary, "bench", "--offline", "--device", "cpu", "--model-dir", d, "--scenario",
                            "decode-1", "--output-tokens", "2"], capture_output=True, text=True, timeout=60,
                           errors="replace")
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        return "timeout", ""


def error_line(out):
    lines = [l for l in out.splitlines() if l.startswith("error:") or "engine error" in l]
    return lines[-1] if lines else ""


def make_base(name, flag):
    d = os.path.join(work, name)
    r = subprocess.run([binary, "synth-checkpoint", "--out", d, "--preset", "tiny", flag],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        fail(f"synth-checkpoint {flag}: {r.stderr[-500:]}")
        sys.exit(1)
    rc, out = load(d)
    if rc != 0:
        fail(f"the unmutated {name} checkpoint does not load: rc={rc} {out[-500:]}")
        sys.exit(1)
    return d


bases = {"exl3": make_base("exl3", "--exl3"), "fp8": make_base("fp8", "--fp8-experts")}
counts = {"ok": 0, "refused": 0}

# Random mutations: never a crash or a hang; a refusal says why, naming the folder's file or tensor.
for name, base in bases.items():
    rng = random.Random(20261206 + len(name))
    for i in range(runs):
        d = os.path.join(work, "m")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        kinds = []
        for _ in range(rng.choice([1, 1, 2])):
            try:
                kinds.append(mutate(d, rng))
            except (ValueError, KeyError, IndexError, UnicodeDecodeError) as e:  # a header the first mutation broke
                kinds.append((f"skipped ({type(e).__name__})", False))
        rc, out = load(d)
        what = f"{name} #{i} {[k for k, _ in kinds]}"
        if rc == "timeout":
            fail(f"{what}: no answer within 60 s")
        elif rc not in (0, 1):
            fail(f"{what}: exit code {rc} (a signal or an abort); output tail: {out[-800:]}")
        elif rc == 1:
            counts["refused"] += 1
            line = error_line(out)
            if not line:
                fail(f"{what}: exit 1 without an error line: {out[-800:]}")
            elif "engine error" in line:
                # Only damaged weight bytes of a large matrix may load and then fail a reply (NaN logits).
                if not any(data for _, data in kinds):
                    fail(f"{what}: loaded and then failed a reply: {line}")
            elif d not in line and "tensor '" not in line:
                fail(f"{what}: the error names neither a file of the folder nor a tensor: {line}")
        else:
            counts["ok"] += 1
print(f"random mutations: {counts['ok']} loaded, {counts['refused']} refused", flush=True)


# Targeted refusals: each must fail, and its error must hold every needle.
def targeted(label, base, change, needles):
    d = os.path.join(work, "t")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(base, d)
    change(d)
    rc, out = load(d)
    line = error_line(out)
    if rc != 1 or not all(n in line for n in needles):
        fail(f"{label}: expected a refusal holding {needles}, got rc={rc}: {line or out[-500:]}")
    else:
        print(f"ok: {label}: {line[:160]}", flush=True)


def set_tensor_value(d, suffix, index, pack, value):
    """Writes `value` into element `index` of the first tensor whose name ends with `suffix`."""
    for f in shards(d):
        path = os.path.join(d, f)
        header, body = read_st(path)
        for name in sorted(header):
            if name != "__metadata__" and name.endswith(suffix):
                begin = header[name]["data_offsets"][0]
                size = struct.calcsize(pack)
                body = body[:begin + index * size] + struct.pack(pack, value) + body[begin + (index + 1) * size:]
                write_st(path, header, body)
                return name
    raise KeyError(suffix)


def set_quant(key, value):
    return lambda d: edit_json(os.path.join(d, "config.json"),
                               lambda c: c["quantization_config"].__setitem__(key, value))


targeted("an EXL3 suh with NaN", bases["exl3"], lambda d: set_tensor_value(d, ".suh", 3, "<H", 0x7E00),
         [".suh'", "non-finite value", "[3]"])
targeted("an FP8 scale of inf", bases["fp8"], lambda d: set_tensor_value(d, ".weight_scale_inv", 0, "<f", float("inf")),
         ["weight_scale_inv", "non-finite value"])
targeted("a norm weight of NaN", bases["fp8"],
         lambda d: set_tensor_value(d, "layers.0.input_layernorm.weight", 1, "<H", 0x7FC0),
         ["input_layernorm.weight'", "non-finite value", "[1]"])
targeted("quant_method gptq", bases["fp8"], set_quant("quant_method", "gptq"),
         ["quantization_config.quant_method 'gptq' is not supported"])
targeted("weight_block_size [128]", bases["fp8"], set_quant("weight_block_size", [128]),
         ["quantization_config.weight_block_size"])
targeted("a truncated EXL3 shard", bases["exl3"],
         lambda d: os.truncate(os.path.join(d, shards(d)[0]), os.path.getsize(os.path.join(d, shards(d)[0])) // 2),
         [shards(bases["exl3"])[0], "truncated"])

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
