#!/usr/bin/env python3
"""Compares freshly generated fixtures (make_model_fixtures.py OUT) with the
committed ones under tests/data/model/: weights must be byte-identical and every
reference tensor the committed file has must be equal in the new one. Prints a
line per fixture; exits 1 on a difference. Needs torch + safetensors."""
import os, sys, filecmp
from safetensors.torch import load_file

new_root = sys.argv[1]
old_root = sys.argv[2] if len(sys.argv) > 2 else "tests/data/model"
bad = False
for name in sorted(os.listdir(new_root)):
    old = os.path.join(old_root, name)
    if not os.path.isdir(old):
        print(name, "new fixture")
        continue
    new = os.path.join(new_root, name)
    for f in sorted(os.listdir(old)):
        if f.endswith(".safetensors") and f != "reference.safetensors":
            same = filecmp.cmp(os.path.join(old, f), os.path.join(new, f), shallow=False)
            print(name, f, "identical" if same else "DIFFERS")
            bad |= not same
    ro = load_file(os.path.join(old, "reference.safetensors"))
    rn = load_file(os.path.join(new, "reference.safetensors"))
    for k, v in ro.items():
        same = k in rn and rn[k].shape == v.shape and bool((rn[k] == v).all())
        print(name, "reference", k, "equal" if same else "DIFFERS")
        bad |= not same
sys.exit(1 if bad else 0)
