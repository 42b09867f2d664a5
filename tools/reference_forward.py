#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Independent PyTorch reference forward for HF Llama / Qwen2 / Qwen3 / Mistral / SmolLM3
checkpoints.

Written from the HF modeling semantics in docs/formats.md 3.3 (eager attention):
  h   = x + o_proj(attn(rmsnorm_in(x)));  out = h + down(silu(gate(n)) * up(n)), n = rmsnorm_post(h)
  RMSNorm: to fp32, x * rsqrt(mean(x^2) + eps), cast back, then * weight
  RoPE: rotate_half (pairs i, i + d/2); inv_freq = 1 / theta^(2i/d) and angles in fp32;
        rope_scaling linear / dynamic / llama3
  attention: q k^T * hd^-0.5, causal mask (+ Mistral sliding window), softmax in fp32,
        GQA: q head h uses kv head h // (nh / nkv); Qwen2 q/k/v bias; Llama attention_bias/mlp_bias
  Qwen3: q, k = rmsnorm(q head) * q_norm, rmsnorm(k head) * k_norm (weights [hd], eps
        rms_norm_eps) after q_proj / k_proj, before RoPE; attention_bias for q/k/v/o
  SmolLM3: the Llama layout; layers whose no_rope_layers entry is 0 (default: every 4th) skip
        RoPE (NoPE); tie_word_embeddings defaults to true, rope_theta to 2e6
  logits = lm_head(norm(h)) (embed_tokens when tie_word_embeddings)

Loads model.safetensors or shards (F32/F16/BF16), and AutoAWQ gemm/gemv checkpoints,
whose linears are dequantised to fp16((q - z) * s) (formats.md 1.3/1.4).

--dtype: fp32 (default): every weight (AWQ ones after the fp16 dequant) is upcast to
fp32 and everything is computed in fp32. fp64: the same in fp64 (RoPE tables still
built in fp32 as HF does). fp16 / bf16: an *emulation* of HF running in that dtype on a
GPU: weights rounded to the dtype, math in fp32 and every op's result rounded to the
dtype (matmuls accumulate in fp32 and round once, like cuBLAS). Approximate by nature.

CLI:
  reference_forward.py --model DIR --ids 1,2,3 [--all-positions] [--greedy N] --out F.json
  reference_forward.py --model DIR --dequantize-to OUT_DIR
Output JSON: {"ids": [...], "vocab_size": V, "dtype": "fp32", "logits": [[...], ...]}
(one row per position with --all-positions, else only the last), plus "greedy": [...]
(N ids, greedy continuation computed by a full re-forward per step) with --greedy N.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
from typing import Dict, List, Optional

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import awq_pack  # noqa: E402
import safetensors_io as st  # noqa: E402

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
ACT = {"fp32": torch.float32, "fp64": torch.float64, "fp16": torch.float16, "bf16": torch.bfloat16}


# ----------------------------------------------------------------------------- config


class Config:
    def __init__(self, cfg: dict):
        self.raw = cfg
        self.model_type = cfg.get("model_type", "llama")
        if self.model_type not in ("llama", "qwen2", "qwen3", "mistral", "smollm3"):
            raise ValueError(f"unsupported model_type {self.model_type!r}")
        self.hidden = cfg["hidden_size"]
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        # Qwen3Config's head_dim defaults to 128, the others' to hidden / heads.
        self.head_dim = cfg.get("head_dim") or (
            128 if self.model_type == "qwen3" else self.hidden // self.n_heads)
        self.qk_norm = self.model_type == "qwen3"
        self.vocab = cfg["vocab_size"]
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.tie = bool(cfg.get("tie_word_embeddings", self.model_type == "smollm3"))
        # SmolLM3: no_rope_layers[l] == 0 is a NoPE layer (no rotation of q and k); absent, every
        # no_rope_layer_interval-th layer (modelling_smollm3 / configuration_smollm3).
        self.rope_layers = [1] * self.n_layers
        if self.model_type == "smollm3":
            nr = cfg.get("no_rope_layers")
            every = int(cfg.get("no_rope_layer_interval", 4))
            self.rope_layers = [int(x) for x in nr[:self.n_layers]] if nr is not None else [
                int((i + 1) % every != 0) for i in range(self.n_layers)]
        self.max_pos = cfg.get("max_position_embeddings", 2048)
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"unsupported hidden_act {cfg.get('hidden_act')!r}")
        rp = cfg.get("rope_parameters")
        if rp:  # transformers v5 spelling
            self.rope_theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
            rtype = rp.get("rope_type", rp.get("type", "default"))
            self.rope_scaling = None if rtype == "default" else dict(rp, rope_type=rtype)
        else:
            self.rope_theta = float(cfg.get("rope_theta",
                                            2000000.0 if self.model_type == "smollm3" else 10000.0))
            rs = cfg.get("rope_scaling")
            if rs:
                rtype = rs.get("rope_type", rs.get("type", "default"))
                self.rope_scaling = None if rtype == "default" else dict(rs, rope_type=rtype)
            else:
                self.rope_scaling = None
        if float(cfg.get("partial_rotary_factor", 1.0)) != 1.0:
            raise ValueError("partial_rotary_factor != 1 is not supported")
        self.sliding_window = cfg.get("sliding_window") if self.model_type == "mistral" else None
        # Qwen2: released models have use_sliding_window false; formats.md says ignore it.
        if self.model_type == "qwen3" and cfg.get("use_sliding_window", False):
            raise ValueError("Qwen3 use_sliding_window is not supported")
        q = cfg.get("quantization_config")
        self.awq = None
        if q is not None:
            if q.get("quant_method") != "awq":
                raise ValueError(f"unsupported quant_method {q.get('quant_method')!r}")
            version = str(q.get("version", "gemm")).lower()
            if q.get("bits", 4) != 4 or not q.get("zero_point", True) or version not in ("gemm", "gemv"):
                raise ValueError(f"unsupported AWQ config {q}")
            if q.get("backend") == "llm-awq":
                raise ValueError("llm-awq backend layout is not supported")
            self.awq = {"version": version, "group_size": int(q["group_size"])}


# ----------------------------------------------------------------------------- weights


def _tensor(reader: st.CheckpointReader, name: str) -> torch.Tensor:
    a = reader.get(name)  # F16 -> float16, BF16 -> exact float32, F32 -> float32
    return torch.from_numpy(np.ascontiguousarray(a)).float()


def load_linear_weight(reader, cfg: Config, prefix: str) -> torch.Tensor:
    """nn.Linear weight [N, K] as fp32 (dequantised fp16 values for AWQ)."""
    if prefix + ".weight" in reader:
        return _tensor(reader, prefix + ".weight")
    if prefix + ".qweight" in reader:
        if cfg.awq is None:
            raise ValueError(f"{prefix}.qweight present but config has no AWQ quantization_config")
        w16 = awq_pack.dequantize_packed(cfg.awq["version"], reader.get(prefix + ".qweight"),
                                         reader.get(prefix + ".qzeros"),
                                         reader.get(prefix + ".scales"), cfg.awq["group_size"])
        return torch.from_numpy(w16).float()
    raise KeyError(f"no weight for {prefix}")


class Model:
    """Weights of a checkpoint, converted to the compute dtype.

    With low_mem, decoder layers are read (and dequantised) from the mmap'd files
    each time they are used instead of being kept in memory.
    """

    def __init__(self, model_dir: str, dtype: str = "fp32", low_mem: bool = False):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = Config(json.load(f))
        self.dir = model_dir
        self.dtype = dtype
        self.act = ACT[dtype]
        self.low_mem = low_mem
        self.reader = st.CheckpointReader(model_dir)
        c = self.cfg
        self.embed = self._w(_tensor(self.reader, "model.embed_tokens.weight"))
        self.norm = self._w(_tensor(self.reader, "model.norm.weight"))
        if "lm_head.weight" in self.reader:
            self.lm_head = self._w(_tensor(self.reader, "lm_head.weight"))
        elif c.tie:
            self.lm_head = self.embed
        else:
            raise KeyError("lm_head.weight missing and tie_word_embeddings is false")
        if list(self.embed.shape) != [c.vocab, c.hidden]:
            raise ValueError(f"embed_tokens shape {list(self.embed.shape)} != [{c.vocab}, {c.hidden}]")
        self._layers: Dict[int, dict] = {}
        if not low_mem:
            for i in range(c.n_layers):
                self._layers[i] = self._load_layer(i)

    def _w(self, t: torch.Tensor) -> torch.Tensor:
        """Weight in the compute representation: rounded to the activation dtype for the
        fp16/bf16 emulation, then held as fp32 (fp64 in fp64 mode)."""
        if self.dtype == "fp64":
            return t.double()
        if self.dtype in ("fp16", "bf16"):
            return t.to(self.act).float()
        return t.float()

    def _load_layer(self, i: int) -> dict:
        pre = f"model.layers.{i}."
        lw = {}
        for mod in LINEARS:
            lw[mod] = self._w(load_linear_weight(self.reader, self.cfg, pre + mod))
            b = pre + mod + ".bias"
            lw[mod + ".bias"] = self._w(_tensor(self.reader, b)) if b in self.reader else None
        lw["input_layernorm"] = self._w(_tensor(self.reader, pre + "input_layernorm.weight"))
        lw["post_attention_layernorm"] = self._w(
            _tensor(self.reader, pre + "post_attention_layernorm.weight"))
        if self.cfg.qk_norm:
            for norm in ("self_attn.q_norm", "self_attn.k_norm"):
                lw[norm] = self._w(_tensor(self.reader, pre + norm + ".weight"))
        return lw

    def layer(self, i: int) -> dict:
        if i in self._layers:
            return self._layers[i]
        return self._load_layer(i)

    # rounding to the activation dtype (identity for fp32/fp64)
    def rnd(self, x: torch.Tensor) -> torch.Tensor:
        if self.dtype in ("fp16", "bf16"):
            return x.to(self.act).float()
        return x


# ----------------------------------------------------------------------------- math


def rope_inv_freq(cfg: Config, seq_len: int) -> torch.Tensor:
    """inv_freq [hd/2] in fp32, HF `_compute_*_parameters`."""
    dim = cfg.head_dim
    base = cfg.rope_theta
    rs = cfg.rope_scaling
    rtype = rs["rope_type"] if rs else "default"
    if rtype == "dynamic" and seq_len > cfg.max_pos:
        factor = float(rs["factor"])
        base = base * ((factor * seq_len / cfg.max_pos) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if rtype in ("default", "dynamic"):
        return inv_freq
    if rtype == "linear":
        return inv_freq / float(rs["factor"])
    if rtype == "llama3":
        factor = float(rs["factor"])
        low_ff = float(rs["low_freq_factor"])
        high_ff = float(rs["high_freq_factor"])
        old_ctx = float(rs["original_max_position_embeddings"])
        low_freq_wavelen = old_ctx / low_ff
        high_freq_wavelen = old_ctx / high_ff
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama)
    raise ValueError(f"unsupported rope_scaling type {rtype!r}")


def rope_cos_sin(cfg: Config, positions: torch.Tensor, seq_len: int):
    """cos, sin [T, hd] in fp32: emb = cat(freqs, freqs), freqs = pos * inv_freq (fp32)."""
    inv_freq = rope_inv_freq(cfg, seq_len)
    freqs = positions.float()[:, None] * inv_freq[None, :]      # one fp32 product each
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


def rms_norm(m: Model, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x if m.dtype == "fp64" else x.float()
    var = xf.pow(2).mean(-1, keepdim=True)
    y = m.rnd(xf * torch.rsqrt(var + eps))   # cast back to the activation dtype
    return m.rnd(w * y)                      # then multiply by the weight


def linear(m: Model, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
    y = x @ w.T
    if b is not None:
        y = y + b
    return m.rnd(y)


def attention(m: Model, lw: dict, x: torch.Tensor, positions: torch.Tensor,
              use_rope: bool = True) -> torch.Tensor:
    """Self-attention of one layer on normalised input x [T, H] -> [T, H]."""
    c = m.cfg
    t = x.shape[0]
    nh, nkv, hd = c.n_heads, c.n_kv, c.head_dim
    q = linear(m, x, lw["self_attn.q_proj"], lw["self_attn.q_proj.bias"]).view(t, nh, hd).transpose(0, 1)
    k = linear(m, x, lw["self_attn.k_proj"], lw["self_attn.k_proj.bias"]).view(t, nkv, hd).transpose(0, 1)
    v = linear(m, x, lw["self_attn.v_proj"], lw["self_attn.v_proj.bias"]).view(t, nkv, hd).transpose(0, 1)
    if c.qk_norm:  # Qwen3: RMSNorm over each head's hd values, before RoPE
        q = rms_norm(m, q, lw["self_attn.q_norm"], c.eps)
        k = rms_norm(m, k, lw["self_attn.k_norm"], c.eps)
    if use_rope:
        cos, sin = rope_cos_sin(c, positions, int(positions.max()) + 1)
        cos, sin = m.rnd(cos.to(x.dtype)), m.rnd(sin.to(x.dtype))
        q = m.rnd(m.rnd(q * cos) + m.rnd(rotate_half(q) * sin))
        k = m.rnd(m.rnd(k * cos) + m.rnd(rotate_half(k) * sin))
    n_rep = nh // nkv
    k = k.repeat_interleave(n_rep, dim=0)    # head h <- kv head h // n_rep (HF repeat_kv)
    v = v.repeat_interleave(n_rep, dim=0)
    scores = m.rnd(m.rnd(q @ k.transpose(1, 2)) * (hd ** -0.5))          # [nh, T, T]
    i = positions[:, None]
    j = positions[None, :]
    allowed = j <= i
    if c.sliding_window is not None:
        allowed = allowed & (j > i - int(c.sliding_window))
    scores = scores.masked_fill(~allowed, float("-inf"))
    sdt = torch.float64 if m.dtype == "fp64" else torch.float32
    probs = m.rnd(torch.softmax(scores.to(sdt), dim=-1))
    out = m.rnd(probs @ v)                                               # [nh, T, hd]
    out = out.transpose(0, 1).reshape(t, nh * hd)
    return linear(m, out, lw["self_attn.o_proj"], lw["self_attn.o_proj.bias"])


def mlp(m: Model, lw: dict, x: torch.Tensor) -> torch.Tensor:
    g = linear(m, x, lw["mlp.gate_proj"], lw["mlp.gate_proj.bias"])
    u = linear(m, x, lw["mlp.up_proj"], lw["mlp.up_proj.bias"])
    a = m.rnd(torch.nn.functional.silu(g))
    return linear(m, m.rnd(a * u), lw["mlp.down_proj"], lw["mlp.down_proj.bias"])


def decoder_layer(m: Model, lw: dict, h: torch.Tensor, positions: torch.Tensor,
                  use_rope: bool = True) -> torch.Tensor:
    eps = m.cfg.eps
    h = m.rnd(h + attention(m, lw, rms_norm(m, h, lw["input_layernorm"], eps), positions, use_rope))
    return m.rnd(h + mlp(m, lw, rms_norm(m, h, lw["post_attention_layernorm"], eps)))


@torch.no_grad()
def forward(m: Model, ids: List[int], return_hidden: bool = False):
    """Logits [T, V] (fp32, fp64 in fp64 mode) for token ids at positions 0..T-1."""
    c = m.cfg
    if any(i < 0 or i >= c.vocab for i in ids):
        raise ValueError("token id out of range")
    positions = torch.arange(len(ids))
    h = m.embed[torch.tensor(ids, dtype=torch.long)]
    hidden = [h]
    for li in range(c.n_layers):
        h = decoder_layer(m, m.layer(li), h, positions, bool(c.rope_layers[li]))
        hidden.append(h)
    logits = linear(m, rms_norm(m, h, m.norm, c.eps), m.lm_head, None)
    return (logits, hidden) if return_hidden else logits


@torch.no_grad()
def greedy(m: Model, ids: List[int], n: int) -> List[int]:
    """n greedy tokens; each step re-runs the full forward on prompt + generated."""
    seq = list(ids)
    out = []
    for _ in range(n):
        nxt = int(torch.argmax(forward(m, seq)[-1]))
        out.append(nxt)
        seq.append(nxt)
    return out


# ----------------------------------------------------------------------------- dequantize-to


def _natural_key(name: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def dequantize_to(model_dir: str, out_dir: str, max_shard_size: int = 5_000_000_000):
    """Write the checkpoint as a plain fp32 HF checkpoint (AWQ linears dequantised to
    fp16((q - z) * s) and stored as fp32 `.weight`)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    cfg = Config(raw)
    reader = st.CheckpointReader(model_dir)
    specs, jobs = [], []
    for name in sorted(reader.keys(), key=_natural_key):
        if name.endswith(".qweight"):
            pre = name[: -len(".qweight")]
            sh = reader.shape(name)
            if cfg.awq["version"] == "gemm":
                n, k = reader.shape(pre + ".scales")[1], sh[0]
            else:
                n, k = sh[0], sh[1] * 8
            specs.append((pre + ".weight", "F32", [n, k]))
            jobs.append((pre + ".weight", pre, "awq"))
        elif name.endswith(".qzeros") or (name.endswith(".scales") and name[:-7] + ".qweight" in reader):
            continue
        else:
            specs.append((name, "F32", reader.shape(name)))
            jobs.append((name, name, "plain"))
    os.makedirs(out_dir, exist_ok=True)
    with st.ShardedWriter(out_dir, specs, max_shard_size) as w:
        for out_name, src, kind in jobs:
            if kind == "awq":
                w.write(out_name, load_linear_weight(reader, cfg, src).numpy())
            else:
                w.write(out_name, reader.get(src).astype(np.float32))
    raw = dict(raw)
    raw.pop("quantization_config", None)
    raw["torch_dtype"] = "float32"
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
        f.write("\n")
    for extra in ("generation_config.json", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json"):
        src = os.path.join(model_dir, extra)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(out_dir, extra))
    reader.close()


# ----------------------------------------------------------------------------- CLI


def main(argv=None):
    p = argparse.ArgumentParser(
        description="HF Llama/Qwen2/Qwen3/Mistral reference forward (PyTorch, CPU)")
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--ids", help="comma-separated prompt token ids, e.g. 1,2,3")
    p.add_argument("--all-positions", action="store_true", help="emit logits for every position")
    p.add_argument("--greedy", type=int, default=0, metavar="N", help="also emit N greedy ids")
    p.add_argument("--out", help="output JSON file")
    p.add_argument("--dtype", choices=sorted(ACT), default="fp32")
    p.add_argument("--low-mem", action="store_true",
                   help="re-read decoder layers from disk on use instead of caching them")
    p.add_argument("--dequantize-to", metavar="DIR",
                   help="write the checkpoint as a plain fp32 HF checkpoint and exit (unless --ids)")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.dequantize_to:
        dequantize_to(a.model, a.dequantize_to)
        print(f"wrote {a.dequantize_to}", file=sys.stderr)
        if not a.ids:
            return
    if not a.ids or not a.out:
        p.error("--ids and --out are required (unless only --dequantize-to)")
    ids = [int(x) for x in a.ids.split(",") if x.strip()]
    if not ids:
        p.error("--ids is empty")
    t0 = time.time()
    m = Model(a.model, a.dtype, low_mem=a.low_mem)
    logits = forward(m, ids)
    rows = logits if a.all_positions else logits[-1:]
    if not torch.isfinite(rows).all():
        print("warning: non-finite logits", file=sys.stderr)
    res = {"ids": ids, "vocab_size": m.cfg.vocab, "dtype": a.dtype,
           "logits": rows.double().tolist()}
    if a.greedy:
        res["greedy"] = greedy(m, ids, a.greedy)
    with open(a.out, "w") as f:
        json.dump(res, f)
    print(f"wrote {a.out} ({len(rows)} row(s), {time.time() - t0:.1f}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
