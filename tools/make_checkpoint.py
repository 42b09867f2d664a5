#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write random-weight HF Llama / Qwen2 / Qwen3 / Mistral checkpoints, optionally AutoAWQ-quantised.

Output directory: config.json, generation_config.json, and model.safetensors or
model-0000i-of-0000M.safetensors + model.safetensors.index.json (huggingface_hub
sharding, formats.md section 2). No tokenizer files are written.

Tensor names, shapes and state-dict order follow formats.md 3.1 / 1.2 (AutoAWQ
stores each quantised linear as qweight, qzeros, scales[, bias]).

Random weights (numpy, one generator per tensor/module seeded from
(seed, crc32(name)), so the output does not depend on generation order):
  * embed_tokens, lm_head, q/k/v/gate/up: N(0, init_std)
  * o_proj, down_proj: N(0, init_std / sqrt(2 * layers)) (GPT-2 style scaled init,
    keeps the residual stream O(1) over many layers; logits stay finite in fp16)
  * RMSNorm weights (Qwen3's per-head q_norm / k_norm too): 1 + N(0, 0.02);
    biases: N(0, 0.02)

With --awq, the decoder-layer linears are stored as AutoAWQ gemm or gemv tensors
(embed/norms/lm_head/biases, Qwen3's q_norm / k_norm included, stay --dtype, fp16 by
default, as AutoAWQ writes).
Two ways to get the 4-bit codes (--awq-codes):
  rtn        draw the fp16 weight above and run AutoAWQ's RTN quantiser on it
             (tools/awq_pack.py, the exact fp16 pseudo_quantize_tensor math; no
             activation-aware scale search, no clipping). The checkpoint is what
             AutoAWQ would write for that weight with the search disabled.
  synthetic  draw codes/zeros/scales directly (awq_pack.synthetic_codes): each
             group gets z in {7,8}, codes ~ round(N(z, 2.5)) clipped to [0,15],
             fp16 scales ~ std/2.5. Same format and value ranges, dequantised
             std ~= the target std; ~50x faster and no big float matrices.
  auto       (default) rtn when the quantised linears hold <= 64M weights, else synthetic.
Either way the result is a valid AutoAWQ checkpoint (layouts of formats.md 1.3/1.4).

Streaming: the header of every shard is planned from names/shapes first; tensors
are then generated one at a time (embeddings in row chunks) and written at their
offsets, so peak memory is about one decoder linear, not the model.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import awq_pack  # noqa: E402
import safetensors_io as st  # noqa: E402

TRANSFORMERS_VERSION = "4.46.0"

PRESETS = {
    "qwen2-7b": dict(arch="qwen2", hidden=3584, layers=28, heads=28, kv_heads=4,
                     intermediate=18944, vocab=152064, rope_theta=1e6, rms_eps=1e-6,
                     tie_embeddings=False, max_pos=32768, awq="gemm", group_size=128, dtype="fp16"),
    "tinyllama-1.1b": dict(arch="llama", hidden=2048, layers=22, heads=32, kv_heads=4,
                           intermediate=5632, vocab=32000, rope_theta=10000.0, rms_eps=1e-5,
                           tie_embeddings=False, max_pos=2048, awq="gemm", group_size=128,
                           dtype="fp16"),
    "qwen2-0.5b": dict(arch="qwen2", hidden=896, layers=24, heads=14, kv_heads=2,
                       intermediate=4864, vocab=151936, rope_theta=1e6, rms_eps=1e-6,
                       tie_embeddings=True, max_pos=32768, awq="gemm", group_size=128,
                       dtype="fp16"),
    # Qwen/Qwen3-0.6B and Qwen/Qwen3-8B shapes (head_dim 128 != hidden / heads for 0.6B).
    "qwen3-0.6b": dict(arch="qwen3", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128,
                       intermediate=3072, vocab=151936, rope_theta=1e6, rms_eps=1e-6,
                       tie_embeddings=True, max_pos=40960, awq="gemm", group_size=128,
                       dtype="fp16"),
    "qwen3-8b": dict(arch="qwen3", hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128,
                     intermediate=12288, vocab=151936, rope_theta=1e6, rms_eps=1e-6,
                     tie_embeddings=False, max_pos=40960, awq="gemm", group_size=128,
                     dtype="fp16"),
    # HuggingFaceTB/SmolLM3-3B's shape: the Llama layout, every 4th layer NoPE, tied embeddings.
    "smollm3-3b": dict(arch="smollm3", hidden=2048, layers=36, heads=16, kv_heads=4,
                       intermediate=11008, vocab=128256, rope_theta=5e6, rms_eps=1e-6,
                       tie_embeddings=True, max_pos=65536, awq="gemm", group_size=128,
                       dtype="bf16"),
}
DEFAULTS = dict(arch=None, hidden=None, layers=None, heads=None, kv_heads=None, head_dim=None,
                intermediate=None, vocab=None, tie_embeddings=False, rope_theta=None,
                rope_scaling_llama3=None, rms_eps=None, max_pos=None, dtype="fp16", awq="none",
                group_size=128, shard_size_mb=5000, seed=0, init_std=0.02, awq_codes="auto",
                attention_bias=False, mlp_bias=False, sliding_window=None, header_order="writer",
                no_rope_layers=None)
ARCH_CLASS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
              "qwen3": "Qwen3ForCausalLM", "mistral": "MistralForCausalLM",
              "smollm3": "SmolLM3ForCausalLM"}
QWEN = ("qwen2", "qwen3")
TORCH_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
ST_DTYPE = {"fp16": "F16", "bf16": "BF16", "fp32": "F32"}
RTN_AUTO_LIMIT = 64 * 1024 * 1024
NORM_NOISE = 0.02
BIAS_STD = 0.02
CHUNK_ELEMS = 16 * 1024 * 1024


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    S = argparse.SUPPRESS
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None)
    p.add_argument("--arch", "--model-type", dest="arch", choices=sorted(ARCH_CLASS), default=S,
                   help="config.json model_type")
    p.add_argument("--hidden", type=int, default=S)
    p.add_argument("--layers", type=int, default=S)
    p.add_argument("--heads", type=int, default=S)
    p.add_argument("--kv-heads", dest="kv_heads", type=int, default=S)
    p.add_argument("--head-dim", dest="head_dim", type=int, default=S,
                   help="written to config.json as head_dim (default hidden/heads, not written)")
    p.add_argument("--intermediate", type=int, default=S)
    p.add_argument("--vocab", type=int, default=S)
    p.add_argument("--tie-embeddings", dest="tie_embeddings", action="store_true", default=S)
    p.add_argument("--untie-embeddings", dest="tie_embeddings", action="store_false", default=S)
    p.add_argument("--rope-theta", dest="rope_theta", type=float, default=S)
    p.add_argument("--rope-scaling-llama3", dest="rope_scaling_llama3", default=S,
                   metavar="FACTOR,LOW,HIGH,ORIG_CTX")
    p.add_argument("--rms-eps", dest="rms_eps", type=float, default=S)
    p.add_argument("--max-pos", dest="max_pos", type=int, default=S)
    p.add_argument("--dtype", choices=sorted(ST_DTYPE), default=S)
    p.add_argument("--awq", choices=["none", "gemm", "gemv"], default=S)
    p.add_argument("--awq-codes", dest="awq_codes", choices=["auto", "rtn", "synthetic"], default=S)
    p.add_argument("--group-size", dest="group_size", type=int, default=S)
    p.add_argument("--shard-size-mb", dest="shard_size_mb", type=float, default=S,
                   help="max shard size in MB (10^6 bytes, like huggingface_hub); default 5000")
    p.add_argument("--seed", type=int, default=S)
    p.add_argument("--init-std", dest="init_std", type=float, default=S)
    p.add_argument("--attention-bias", dest="attention_bias", action="store_true", default=S,
                   help="llama/mistral/qwen3: q/k/v/o biases (config attention_bias)")
    p.add_argument("--mlp-bias", dest="mlp_bias", action="store_true", default=S,
                   help="llama: gate/up/down biases (config mlp_bias)")
    p.add_argument("--sliding-window", dest="sliding_window", type=int, default=S,
                   help="mistral: config sliding_window (default null)")
    p.add_argument("--no-rope-layers", dest="no_rope_layers", default=S, metavar="0/1,...",
                   help="smollm3: config no_rope_layers, 1 RoPE / 0 NoPE per layer (default: "
                        "every 4th layer NoPE)")
    p.add_argument("--header-order", dest="header_order", choices=["writer", "sorted"], default=S,
                   help="safetensors header JSON key order (default: as the Rust writer)")
    ns = p.parse_args(argv)
    opts = dict(DEFAULTS)
    if ns.preset:
        opts.update(PRESETS[ns.preset])
    for k, v in vars(ns).items():
        opts[k] = v
    missing = [k for k in ("arch", "hidden", "layers", "heads", "intermediate", "vocab")
               if opts[k] is None]
    if missing:
        p.error("missing (no --preset): " + ", ".join("--" + m.replace("_", "-") for m in missing))
    return argparse.Namespace(**opts)


def build_config(a) -> dict:
    arch = a.arch
    nkv = a.kv_heads if a.kv_heads is not None else a.heads
    theta = a.rope_theta if a.rope_theta is not None else (1e6 if arch in QWEN else 10000.0)
    eps = a.rms_eps if a.rms_eps is not None else (1e-6 if arch in QWEN else 1e-5)
    max_pos = a.max_pos if a.max_pos is not None else (
        40960 if arch == "qwen3" else 32768 if arch in ("qwen2", "mistral") else 2048)
    if arch == "qwen2" and a.vocab > 151645:
        bos, eos = 151643, 151643
    elif arch == "qwen3" and a.vocab > 151645:
        bos, eos = 151643, 151645
    elif arch in QWEN:
        bos = eos = a.vocab - 1
    elif arch == "smollm3" and a.vocab >= 128256:
        bos, eos = 128000, 128012
    else:
        bos, eos = 1, 2
    rope_scaling = None
    if a.rope_scaling_llama3:
        f, lo, hi, octx = a.rope_scaling_llama3.split(",")
        rope_scaling = {"factor": float(f), "high_freq_factor": float(hi),
                        "low_freq_factor": float(lo),
                        "original_max_position_embeddings": int(octx), "rope_type": "llama3"}
    cfg = {"architectures": [ARCH_CLASS[arch]], "attention_dropout": 0.0,
           "bos_token_id": bos, "eos_token_id": eos}
    if arch in ("llama", "mistral", "qwen3", "smollm3"):
        cfg["attention_bias"] = bool(a.attention_bias)
    if a.head_dim is not None:
        cfg["head_dim"] = a.head_dim
    cfg.update({"hidden_act": "silu", "hidden_size": a.hidden, "initializer_range": a.init_std,
                "intermediate_size": a.intermediate, "max_position_embeddings": max_pos})
    if arch in QWEN:
        cfg["max_window_layers"] = a.layers
    if arch in ("llama", "smollm3"):
        cfg["mlp_bias"] = bool(a.mlp_bias)
    cfg.update({"model_type": arch, "num_attention_heads": a.heads,
                "num_hidden_layers": a.layers, "num_key_value_heads": nkv})
    if arch == "llama":
        cfg["pretraining_tp"] = 1
    cfg.update({"rms_norm_eps": eps, "rope_scaling": rope_scaling, "rope_theta": theta})
    if arch == "qwen2":
        cfg["sliding_window"] = max_pos
    if arch == "qwen3":
        cfg["sliding_window"] = None
    if arch == "mistral":
        cfg["sliding_window"] = a.sliding_window
    if arch == "smollm3":
        nope = ([int(x) for x in a.no_rope_layers.split(",")] if a.no_rope_layers else
                [int((i + 1) % 4 != 0) for i in range(a.layers)])
        if len(nope) != a.layers or any(x not in (0, 1) for x in nope):
            raise SystemExit(f"--no-rope-layers: expected {a.layers} entries of 0 or 1")
        cfg.update({"no_rope_layer_interval": 4, "no_rope_layers": nope, "sliding_window": None})
    cfg.update({"tie_word_embeddings": bool(a.tie_embeddings),
                "torch_dtype": TORCH_DTYPE[a.dtype], "transformers_version": TRANSFORMERS_VERSION,
                "use_cache": True})
    if arch in QWEN or arch == "smollm3":
        cfg["use_sliding_window"] = False
    cfg["vocab_size"] = a.vocab
    if a.awq != "none":
        cfg["quantization_config"] = {"quant_method": "awq", "zero_point": True,
                                      "group_size": a.group_size, "bits": 4,
                                      "version": a.awq, "modules_to_not_convert": None}
    return cfg


def head_dim_of(cfg) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def linear_specs(cfg, a):
    """[(module_name, N, K, has_bias, std)] for one decoder layer, in module order."""
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg["num_key_value_heads"]
    hd = head_dim_of(cfg)
    inter = cfg["intermediate_size"]
    arch = cfg["model_type"]
    qkv_bias = arch == "qwen2" or cfg.get("attention_bias", False)
    o_bias = arch != "qwen2" and cfg.get("attention_bias", False)
    mlp_bias = cfg.get("mlp_bias", False)
    std = a.init_std
    std_out = a.init_std / math.sqrt(2 * cfg["num_hidden_layers"])
    return [("self_attn.q_proj", nh * hd, h, qkv_bias, std),
            ("self_attn.k_proj", nkv * hd, h, qkv_bias, std),
            ("self_attn.v_proj", nkv * hd, h, qkv_bias, std),
            ("self_attn.o_proj", h, nh * hd, o_bias, std_out),
            ("mlp.gate_proj", inter, h, mlp_bias, std),
            ("mlp.up_proj", inter, h, mlp_bias, std),
            ("mlp.down_proj", h, inter, mlp_bias, std_out)]


def plan(cfg, a):
    """State-dict ordered [(name, st_dtype, shape)] and a generation job list."""
    fdt = ST_DTYPE[a.dtype]
    h, v, nl = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    specs, jobs = [], []
    specs.append(("model.embed_tokens.weight", fdt, [v, h]))
    jobs.append(("dense", "model.embed_tokens.weight", [v, h], a.init_std))
    for i in range(nl):
        pre = f"model.layers.{i}."
        for mod, n, k, bias, std in linear_specs(cfg, a):
            name = pre + mod
            if a.awq != "none":
                shp = awq_pack.packed_shapes(a.awq, n, k, a.group_size)
                specs += [(name + ".qweight", "I32", shp[0]), (name + ".qzeros", "I32", shp[1]),
                          (name + ".scales", "F16", shp[2])]
                jobs.append(("awq", name, [n, k], std))
            else:
                specs.append((name + ".weight", fdt, [n, k]))
                jobs.append(("dense", name + ".weight", [n, k], std))
            if bias:
                specs.append((name + ".bias", fdt, [n]))
                jobs.append(("bias", name + ".bias", [n], BIAS_STD))
            if mod == "self_attn.o_proj" and cfg["model_type"] == "qwen3":
                # Qwen3Attention registers q_norm, k_norm after o_proj: state-dict order.
                hd = head_dim_of(cfg)
                for norm in ("self_attn.q_norm", "self_attn.k_norm"):
                    specs.append((pre + norm + ".weight", fdt, [hd]))
                    jobs.append(("norm", pre + norm + ".weight", [hd], NORM_NOISE))
        for norm in ("input_layernorm", "post_attention_layernorm"):
            specs.append((pre + norm + ".weight", fdt, [h]))
            jobs.append(("norm", pre + norm + ".weight", [h], NORM_NOISE))
    specs.append(("model.norm.weight", fdt, [h]))
    jobs.append(("norm", "model.norm.weight", [h], NORM_NOISE))
    if not cfg["tie_word_embeddings"]:
        specs.append(("lm_head.weight", fdt, [v, h]))
        jobs.append(("dense", "lm_head.weight", [v, h], a.init_std))
    return specs, jobs


def rng_for(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def to_storage(x32: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "fp16":
        return x32.astype(np.float16)
    if dtype == "bf16":
        return st.f32_to_bf16_bits(x32)
    return x32.astype(np.float32, copy=False)


def generate(a, log=print):
    cfg = build_config(a)
    for n_, k_ in (("hidden_size", "num_attention_heads"),):
        if cfg.get("head_dim") is None and cfg[n_] % cfg[k_]:
            raise SystemExit("hidden must be divisible by heads (or pass --head-dim)")
    if cfg["num_attention_heads"] % cfg["num_key_value_heads"]:
        raise SystemExit("heads must be a multiple of kv-heads")
    specs, jobs = plan(cfg, a)
    codes_mode = a.awq_codes
    if a.awq != "none" and codes_mode == "auto":
        nq = sum(j[2][0] * j[2][1] for j in jobs if j[0] == "awq")
        codes_mode = "rtn" if nq <= RTN_AUTO_LIMIT else "synthetic"
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.out):   # stale shards from an earlier run would confuse readers
        if f.endswith(".safetensors") or f == st.INDEX_NAME:
            os.remove(os.path.join(a.out, f))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"],
           "eos_token_id": cfg["eos_token_id"], "transformers_version": TRANSFORMERS_VERSION}
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
        f.write("\n")

    t0 = time.time()
    max_shard = int(round(a.shard_size_mb * 1_000_000))
    with st.ShardedWriter(a.out, specs, max_shard, header_order=a.header_order) as w:
        for kind, name, shape, std in jobs:
            # keyed by module, so a linear gets the same fp16 weight with and without --awq
            rng = rng_for(a.seed, name[:-len(".weight")] if name.endswith(".weight") else name)
            if kind == "dense":
                rows = max(1, CHUNK_ELEMS // int(np.prod(shape[1:])))
                for r0 in range(0, shape[0], rows):
                    r1 = min(shape[0], r0 + rows)
                    x = rng.standard_normal((r1 - r0,) + tuple(shape[1:]), dtype=np.float32)
                    x *= np.float32(std)
                    w.write_rows(name, to_storage(x, a.dtype), r0)
            elif kind == "norm":
                x = 1.0 + std * rng.standard_normal(shape, dtype=np.float32)
                w.write(name, to_storage(x.astype(np.float32), a.dtype))
            elif kind == "bias":
                x = std * rng.standard_normal(shape, dtype=np.float32)
                w.write(name, to_storage(x.astype(np.float32), a.dtype))
            elif kind == "awq":
                n, k = shape
                if codes_mode == "rtn":
                    wf = (rng.standard_normal((n, k), dtype=np.float32) * np.float32(std))
                    q, z, s, _ = awq_pack.quantize_rtn(wf.astype(np.float16), a.group_size)
                    del wf
                else:
                    q, z, s = awq_pack.synthetic_codes(rng, n, k, a.group_size, std)
                qw, qz, sc = awq_pack.pack(a.awq, q, z, s, a.group_size)
                del q, z, s
                w.write(name + ".qweight", qw)
                w.write(name + ".qzeros", qz)
                w.write(name + ".scales", sc)
            if kind in ("dense", "awq") and name.startswith("model.layers.") and \
                    name.split(".")[3:5] == ["mlp", "down_proj"]:
                log(f"  layer {name.split('.')[2]} done ({time.time() - t0:.1f}s)")
    total = w.total_size
    log(f"wrote {a.out}: {len(w.files)} file(s), {total / 1e6:.1f} MB of tensors, "
        f"awq={a.awq}{'/' + codes_mode if a.awq != 'none' else ''}, {time.time() - t0:.1f}s")
    return cfg


def main(argv=None):
    a = parse_args(argv)
    generate(a)


if __name__ == "__main__":
    main()
