#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Makes a function-preserving "outlier" copy of an fp16 Llama/Qwen2 checkpoint for the AWQ
experiment (issue 19): in every layer, `--channels` input channels (seeded, the same for both
norms of a layer) of input_layernorm and post_attention_layernorm are multiplied by `--factor`
and the matching input columns of q/k/v_proj and gate/up_proj divided by it. The float model is
unchanged (a power-of-two factor is exact), but those activation channels become outliers that
round-to-nearest quantisation handles badly. Weights are written as F32 (no fp16 underflow).

usage: make_outlier_model.py SRC_DIR OUT_DIR [--factor 16] [--channels 4] [--seed 0]
"""
import argparse
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from safetensors_io import load_file, save_file  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--factor", type=float, default=16.0)
    ap.add_argument("--channels", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t = load_file(os.path.join(a.src, "model.safetensors"))
    t = {k: np.asarray(v, dtype=np.float32) for k, v in t.items()}
    rng = random.Random(a.seed)
    layers = sorted({int(k.split(".")[2]) for k in t if k.startswith("model.layers.")})
    for i in layers:
        p = f"model.layers.{i}."
        hidden = t[p + "input_layernorm.weight"].shape[0]
        ch = rng.sample(range(hidden), a.channels)
        for norm, lins in (("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj",
                                                 "self_attn.v_proj")),
                           ("post_attention_layernorm", ("mlp.gate_proj", "mlp.up_proj"))):
            t[p + norm + ".weight"][ch] *= a.factor
            for lin in lins:
                t[p + lin + ".weight"][:, ch] /= a.factor
    os.makedirs(a.out, exist_ok=True)
    save_file(t, os.path.join(a.out, "model.safetensors"))
    for f in os.listdir(a.src):
        if not f.endswith(".safetensors") and os.path.isfile(os.path.join(a.src, f)):
            shutil.copy(os.path.join(a.src, f), os.path.join(a.out, f))


if __name__ == "__main__":
    main()
