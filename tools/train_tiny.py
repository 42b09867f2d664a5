#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Train the bundled KJV models: a byte-level BPE tokenizer and a target/draft Llama pair.

Data: the King James Bible from Debian's bible-kjv package (`bible -f Gen1:1-Rev22:21`,
public domain), one verse per line with the reference stripped, <|endoftext|> between
books. The last books (James .. Revelation) are held out as evaluation text.

Stages (each resumable; `all` runs them in order):
  tokenizer  byte-level BPE (Qwen2 pre-tokenizer regex, NFC, ChatML special tokens) trained
             on the training books; written as a Hugging Face tokenizer.json.
  train      target (~11 M parameters) and draft (~1.3 M) trained together on the same
             batches: the target on cross-entropy, the draft on cross-entropy plus the KL
             divergence to the target's (detached) next-token distribution, so that the
             draft learns to guess what the target will say (speculative decoding accepts
             exactly those guesses). Checkpoints (models, optimisers, RNG, step) go to
             --work every --save-every steps; a rerun resumes from the latest one.
  distill    on-policy distillation of the exported draft (DistillSpec-style): --sequences
             prompts cut from the *training* books, each continued greedily for 128 tokens by
             the exported int4 target run by edgellm itself (`edgellm-generate --print-ids`,
             so the labels are exactly what the target emits at decode time); the draft
             (loaded from --out/kjv-draft-fp16) is fine-tuned for --steps steps on those
             sequences: KL(target || draft) at every position (the fp32 target as teacher;
             keeps the draft calibrated for sampled speculation, which accepts with
             min(1, p/q)) plus --hard-weight x cross-entropy on the target's greedy tokens
             (greedy speculation accepts a drafted token iff it is the target's choice), and
             re-exported. Continuations of held-out text are never used.
  export     HF checkpoints under --out: <name>-fp16/ (model.safetensors, config.json,
             generation_config.json, tokenizer.json) and <name>-awq/ (decoder linears in
             AutoAWQ gemm layout, round-to-nearest, group 128), the held-out text, and the
             losses in --out/train_log.json for the model card.

Deterministic: fixed seeds for data order and initialisation, torch single-process.
Usage: /usr/bin/python3 tools/train_tiny.py all [--minutes 90] [--work build/train] [--out models]
       /usr/bin/python3 tools/train_tiny.py distill --steps 600 --lr 1e-3   (after `all`)
       /usr/bin/python3 tools/train_tiny.py bench       (training tokens/s per model, 20 steps)
"""

from __future__ import annotations

import argparse
import collections
import heapq
import json
import math
import os
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np
import regex
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import awq_pack  # noqa: E402
import safetensors_io as st  # noqa: E402
import tokenizer_ref  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VOCAB_SIZE = 4096
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
HELDOUT_FROM = "Jas"  # book abbreviation in `bible -f` output where the held-out text starts
SEQ_LEN = 512

MODELS = {
    # name: architecture (HF LlamaForCausalLM, tied embeddings)
    "kjv-target": dict(hidden=384, layers=6, heads=6, kv_heads=2, intermediate=1024),
    "kjv-draft": dict(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=384),
}
ROPE_THETA = 10000.0
RMS_EPS = 1e-5


# ----------------------------------------------------------------------------- data

def read_bible() -> tuple[list[str], list[str]]:
    """Training and held-out text, each a list of books (verses joined by newlines)."""
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    books: list[tuple[str, list[str]]] = []
    for line in out.splitlines():
        if not line.strip() or " " not in line:
            continue
        ref, verse = line.split(" ", 1)
        book = regex.match(r"^\d?[A-Za-z]+", ref).group()
        if not books or books[-1][0] != book:
            books.append((book, []))
        books[-1][1].append(verse.strip())
    names = [b for b, _ in books]
    if HELDOUT_FROM not in names or len(books) < 60:
        raise SystemExit(f"unexpected `bible -f` output: books {names[:5]}...")
    cut = names.index(HELDOUT_FROM)
    text = ["\n".join(v) + "\n" for _, v in books]
    return text[:cut], text[cut:]


# ----------------------------------------------------------------------------- tokenizer

def train_bpe(words: collections.Counter, n_merges: int) -> list[tuple[str, str]]:
    """BPE with incremental pair counts: merge the most frequent pair (ties: smallest pair)."""
    seqs = [list(w) for w in words]
    freq = [words[w] for w in words]
    pair_count: collections.Counter = collections.Counter()
    where: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for i, s in enumerate(seqs):
        for p in zip(s, s[1:]):
            pair_count[p] += freq[i]
            where[p].add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        c, p = heapq.heappop(heap)
        if pair_count.get(p, 0) != -c:
            continue  # stale heap entry
        if -c < 2:
            break
        merges.append(p)
        joined = p[0] + p[1]
        for i in list(where[p]):
            s, f = seqs[i], freq[i]
            for q in zip(s, s[1:]):  # remove this word's pairs, re-add after the merge
                pair_count[q] -= f
            out, j = [], 0
            while j < len(s):
                if j + 1 < len(s) and s[j] == p[0] and s[j + 1] == p[1]:
                    out.append(joined)
                    j += 2
                else:
                    out.append(s[j])
                    j += 1
            seqs[i] = out
            touched = set(zip(s, s[1:])) | set(zip(out, out[1:]))
            for q in zip(out, out[1:]):
                pair_count[q] += f
                where[q].add(i)
            for q in touched:
                if pair_count[q] > 0:
                    heapq.heappush(heap, (-pair_count[q], q))
        del pair_count[p]
        where.pop(p, None)
    return merges


def build_tokenizer(train_books: list[str]) -> dict:
    text = unicodedata.normalize("NFC", "".join(train_books))
    words: collections.Counter = collections.Counter()
    for m in regex.finditer(tokenizer_ref.QWEN2_PATTERN, text):
        words["".join(tokenizer_ref.BYTE_TO_CHAR[b] for b in m.group().encode("utf-8"))] += 1
    vocab: dict[str, int] = {}
    for b in tokenizer_ref.BYTE_TO_CHAR:  # GPT-2 order: all 256 bytes first
        vocab[tokenizer_ref.BYTE_TO_CHAR[b]] = len(vocab)
    n_merges = VOCAB_SIZE - len(SPECIALS) - len(vocab)
    merges = train_bpe(words, n_merges)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    added = [{"id": len(vocab) + i, "content": t, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, t in enumerate(SPECIALS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": tokenizer_ref.QWEN2_PATTERN},
             "behavior": "Isolated", "invert": False}, byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab,
                  "merges": [f"{a} {b}" for a, b in merges]},
    }


def load_ref_tokenizer(path: Path) -> "tokenizer_ref.RefTokenizer":
    return tokenizer_ref.RefTokenizer(str(path))


def encode_books(tok, books: list[str]) -> np.ndarray:
    eot = VOCAB_SIZE - len(SPECIALS)  # <|endoftext|>
    ids: list[int] = []
    for b in books:
        ids.append(eot)
        ids += tok.encode(b, add_special=False, parse_special=False)
    return np.asarray(ids, dtype=np.int32)


# ----------------------------------------------------------------------------- model

def rope_tables(head_dim: int, n: int):
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(n, dtype=torch.float32), inv)
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class RMSNorm(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * self.weight


class Layer(torch.nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        h, nh, nkv, inter = c["hidden"], c["heads"], c["kv_heads"], c["intermediate"]
        hd = h // nh
        self.nh, self.nkv, self.hd = nh, nkv, hd
        lin = lambda o, i: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.input_layernorm = RMSNorm(h)
        self.q_proj, self.k_proj, self.v_proj = lin(nh * hd, h), lin(nkv * hd, h), lin(nkv * hd, h)
        self.o_proj = lin(h, nh * hd)
        self.post_attention_layernorm = RMSNorm(h)
        self.gate_proj, self.up_proj, self.down_proj = lin(inter, h), lin(inter, h), lin(h, inter)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        n = self.input_layernorm(x)
        q = self.q_proj(n).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(n).view(b, t, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(n).view(b, t, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2)) * (self.hd ** -0.5)
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        a = torch.softmax(s, dim=-1) @ v
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        n = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class TinyLlama(torch.nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.c = c
        self.embed_tokens = torch.nn.Embedding(VOCAB_SIZE, c["hidden"])
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])
        cos, sin = rope_tables(c["hidden"] // c["heads"], SEQ_LEN)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        std, std_out = 0.02, 0.02 / math.sqrt(2 * c["layers"])
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            torch.nn.init.normal_(p, 0.0, std_out if ("o_proj" in name or "down_proj" in name) else std)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embed_tokens(ids)
        cos, sin = self.cos[:t], self.sin[:t]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x) @ self.embed_tokens.weight.T  # tied lm_head

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# ----------------------------------------------------------------------------- training

def batch_at(data: np.ndarray, rng: np.random.Generator, batch: int):
    starts = rng.integers(0, len(data) - SEQ_LEN - 1, size=batch)
    x = np.stack([data[s:s + SEQ_LEN + 1] for s in starts]).astype(np.int64)
    x = torch.from_numpy(x)
    return x[:, :-1], x[:, 1:]


def lr_at(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 50)
    if step < warm:
        return peak * (step + 1) / warm
    p = min(1.0, (step - warm) / max(1, total - warm))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


@torch.no_grad()
def eval_loss(model, data: np.ndarray, max_windows: int = 64) -> float:
    model.eval()
    losses = []
    n = min(max_windows, (len(data) - 1) // SEQ_LEN)
    for w in range(n):
        s = w * SEQ_LEN
        x = torch.from_numpy(data[s:s + SEQ_LEN + 1].astype(np.int64))[None]
        losses.append(F.cross_entropy(model(x[:, :-1])[0], x[0, 1:]).item())
    model.train()
    return float(np.mean(losses))


def make_models():
    torch.manual_seed(1234)
    return {name: TinyLlama(c) for name, c in MODELS.items()}


def train(a, train_ids: np.ndarray, held_ids: np.ndarray):
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(a.threads)
    models = make_models()
    target, draft = models["kjv-target"], models["kjv-draft"]
    opts = {n: torch.optim.AdamW(m.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
            for n, m in models.items()}
    rng = np.random.default_rng(42)
    step, log = 0, []
    ckpt = work / "checkpoint.pt"
    if ckpt.exists():
        s = torch.load(ckpt)
        for n in models:
            models[n].load_state_dict(s["models"][n])
            opts[n].load_state_dict(s["opts"][n])
        rng.bit_generator.state = s["rng"]
        step, log = s["step"], s["log"]
        print(f"resumed at step {step}", flush=True)
    total = a.steps
    t0, tok0 = time.time(), step
    while step < total:
        x, y = batch_at(train_ids, rng, a.batch)
        lr = lr_at(step, total, a.lr)
        for o in opts.values():
            for g in o.param_groups:
                g["lr"] = lr
        lt = target(x)
        loss_t = F.cross_entropy(lt.reshape(-1, VOCAB_SIZE), y.reshape(-1))
        opts["kjv-target"].zero_grad(set_to_none=True)
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
        opts["kjv-target"].step()
        ld = draft(x).reshape(-1, VOCAB_SIZE)
        ce_d = F.cross_entropy(ld, y.reshape(-1))
        kl_d = F.kl_div(F.log_softmax(ld, -1), F.log_softmax(lt.detach().reshape(-1, VOCAB_SIZE), -1),
                        log_target=True, reduction="batchmean")
        loss_d = 0.5 * ce_d + 0.5 * kl_d
        opts["kjv-draft"].zero_grad(set_to_none=True)
        loss_d.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opts["kjv-draft"].step()
        step += 1
        if step % 25 == 0 or step == total:
            dt = time.time() - t0
            tps = (step - tok0) * a.batch * SEQ_LEN / max(dt, 1e-9)
            print(f"step {step}/{total} lr {lr:.2e} target {loss_t.item():.3f} draft ce "
                  f"{ce_d.item():.3f} kl {kl_d.item():.3f}  {tps:.0f} tok/s", flush=True)
        if step % a.save_every == 0 or step == total:
            entry = {"step": step, "tokens": step * a.batch * SEQ_LEN,
                     "train_loss_target": loss_t.item(), "train_ce_draft": ce_d.item()}
            if step % (a.save_every * 4) == 0 or step == total:
                entry["heldout_loss_target"] = eval_loss(target, held_ids)
                entry["heldout_loss_draft"] = eval_loss(draft, held_ids)
                print(f"  held-out loss: target {entry['heldout_loss_target']:.3f} "
                      f"draft {entry['heldout_loss_draft']:.3f}", flush=True)
            log.append(entry)
            tmp = work / "checkpoint.pt.tmp"
            torch.save({"models": {n: m.state_dict() for n, m in models.items()},
                        "opts": {n: o.state_dict() for n, o in opts.items()},
                        "rng": rng.bit_generator.state, "step": step, "log": log}, tmp)
            os.replace(tmp, ckpt)
    return models, log


# ----------------------------------------------------------------------------- distill

DISTILL_PROMPT, DISTILL_GEN = 64, 128


def generate_onpolicy(a, train_ids: np.ndarray, work: Path, out: Path) -> np.ndarray:
    """[sequences, DISTILL_PROMPT + DISTILL_GEN] token ids: training-text prompts and the int4
    target's greedy continuations, cached in --work."""
    cache = work / f"onpolicy-{a.sequences}.npy"
    if cache.exists():
        return np.load(cache)
    exe = Path(a.generate_bin)
    if not exe.is_file():
        raise SystemExit(f"distill: {exe} not found; build it first (cmake --preset release && "
                         f"cmake --build --preset release --target edgellm-generate)")
    rng = np.random.default_rng(7)
    starts = rng.integers(0, len(train_ids) - DISTILL_PROMPT - 1, size=a.sequences)
    prompts = [train_ids[s:s + DISTILL_PROMPT].astype(np.int64) for s in starts]

    def run(prompt):
        cmd = [str(exe), "--model", str(out / "kjv-target-awq"), "--prompt-ids",
               ",".join(map(str, prompt)), "--greedy", "-n", str(DISTILL_GEN), "--ignore-eos",
               "--print-ids", "--threads", "1"]
        r = subprocess.run(cmd, check=True, capture_output=True, text=True)
        gen = json.loads(r.stdout.strip().splitlines()[-1])
        if len(gen) != DISTILL_GEN:
            raise SystemExit(f"distill: {exe} returned {len(gen)} ids, expected {DISTILL_GEN}")
        return np.concatenate([prompt, np.asarray(gen, dtype=np.int64)])

    import concurrent.futures
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.threads) as ex:
        seqs = np.stack(list(ex.map(run, prompts)))
    print(f"distill: {len(seqs)} target continuations in {time.time() - t0:.0f}s", flush=True)
    np.save(cache, seqs)
    return seqs


def load_exported(name: str, out: Path) -> TinyLlama:
    """The fp16 export of `name` back as a TinyLlama (inverse of export()'s renaming)."""
    m = TinyLlama(MODELS[name])
    t = st.load_file(str(out / f"{name}-fp16" / "model.safetensors"))
    sd = {}
    for k in m.state_dict():
        hf = "model." + k
        if k.startswith("layers."):
            parts = k.split(".")
            short = parts[2]
            sub = "self_attn." if short in ("q_proj", "k_proj", "v_proj", "o_proj") else (
                "mlp." if short in ("gate_proj", "up_proj", "down_proj") else "")
            hf = f"model.layers.{parts[1]}.{sub}{'.'.join(parts[2:])}"
        sd[k] = torch.from_numpy(np.asarray(t[hf], dtype=np.float32))
    m.load_state_dict(sd)
    return m


def distill_draft(a, seqs: np.ndarray, held_ids: np.ndarray, out: Path) -> tuple[TinyLlama, dict]:
    torch.set_num_threads(a.threads)
    draft = load_exported("kjv-draft", out)
    teacher = load_exported("kjv-target", out).eval()
    before = eval_loss(draft, held_ids)
    opt = torch.optim.AdamW(draft.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng = np.random.default_rng(11)
    data = torch.from_numpy(seqs)
    # weights per predicted position: the target's continuation counts fully, the prompt (real
    # text, keeps the draft a language model for sampling) at --prompt-weight
    wpos = torch.full((seqs.shape[1] - 1,), a.prompt_weight)
    wpos[DISTILL_PROMPT - 1:] = 1.0
    wpos = wpos / wpos.sum()
    t0, log = time.time(), []
    for step in range(a.steps):
        idx = torch.from_numpy(rng.integers(0, len(seqs), size=a.batch))
        x, y = data[idx, :-1], data[idx, 1:]
        lr = lr_at(step, a.steps, a.lr)
        for g in opt.param_groups:
            g["lr"] = lr
        ld = F.log_softmax(draft(x).reshape(-1, VOCAB_SIZE), -1)
        with torch.no_grad():
            lt = F.log_softmax(teacher(x).reshape(-1, VOCAB_SIZE), -1)
        # KL(target || draft) at every position keeps the draft's probabilities calibrated
        # (sampled speculation accepts with min(1, p/q)); cross-entropy on the continuation
        # sharpens the agreement with the target's greedy choice.
        kl = (lt.exp() * (lt - ld)).sum(-1).view(a.batch, -1)
        ce = F.nll_loss(ld, y.reshape(-1), reduction="none").view(a.batch, -1)
        loss = (kl * wpos).sum(-1).mean() + a.hard_weight * ce[:, DISTILL_PROMPT - 1:].mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if (step + 1) % 25 == 0 or step + 1 == a.steps:
            gen_ce = ce[:, DISTILL_PROMPT - 1:].mean().item()
            kl_all = kl.mean().item()
            print(f"distill step {step + 1}/{a.steps} lr {lr:.2e} kl {kl_all:.3f} ce(continuation) "
                  f"{gen_ce:.3f} {(step + 1) / (time.time() - t0):.2f} steps/s", flush=True)
            log.append({"step": step + 1, "kl": kl_all, "ce_continuation": gen_ce})
    after = eval_loss(draft, held_ids)
    print(f"distill: draft held-out loss {before:.3f} -> {after:.3f}", flush=True)
    return draft, {"sequences": int(len(seqs)), "prompt_tokens": DISTILL_PROMPT,
                   "continuation_tokens": DISTILL_GEN, "steps": a.steps, "batch": a.batch,
                   "lr": a.lr, "prompt_weight": a.prompt_weight, "hard_weight": a.hard_weight,
                   "heldout_loss_before": before, "heldout_loss_after": after, "log": log}


# ----------------------------------------------------------------------------- export

def hf_config(c: dict, eot: int) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": eot, "eos_token_id": eot, "hidden_act": "silu",
            "hidden_size": c["hidden"], "initializer_range": 0.02,
            "intermediate_size": c["intermediate"], "max_position_embeddings": 2048,
            "mlp_bias": False, "model_type": "llama", "num_attention_heads": c["heads"],
            "num_hidden_layers": c["layers"], "num_key_value_heads": c["kv_heads"],
            "pretraining_tp": 1, "rms_norm_eps": RMS_EPS, "rope_scaling": None,
            "rope_theta": ROPE_THETA, "tie_word_embeddings": True, "torch_dtype": "float16",
            "transformers_version": "4.46.0", "use_cache": True, "vocab_size": VOCAB_SIZE}


def export(model: TinyLlama, name: str, out: Path, tokenizer_json: Path, eot: int):
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    cfg = hf_config(model.c, eot)
    lin = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    for awq in (False, True):
        d = out / f"{name}-{'awq' if awq else 'fp16'}"
        d.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for k, v in sd.items():
            hf = "model." + k
            short = k.split(".")[-2] if k.count(".") >= 2 else ""
            if k.startswith("layers."):
                sub = "self_attn." if short in lin[:4] else ("mlp." if short in lin[4:] else "")
                parts = k.split(".")
                hf = f"model.layers.{parts[1]}.{sub}{'.'.join(parts[2:])}"
            if awq and short in lin:
                q, z, s, _ = awq_pack.quantize_rtn(v.astype(np.float16), 128)
                qw, qz, sc = awq_pack.pack("gemm", q, z, s, 128)
                base = hf[:-len(".weight")]
                tensors[base + ".qweight"], tensors[base + ".qzeros"], tensors[base + ".scales"] = qw, qz, sc
            else:
                tensors[hf] = v.astype(np.float16)
        c = dict(cfg)
        if awq:
            c["quantization_config"] = {"quant_method": "awq", "zero_point": True, "group_size": 128,
                                        "bits": 4, "version": "gemm", "modules_to_not_convert": None}
        st.save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
        (d / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
        (d / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": eot, "eos_token_id": eot, "transformers_version": "4.46.0"},
            indent=2, sort_keys=True) + "\n")
        (d / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
        print(f"wrote {d} ({sum(f.stat().st_size for f in d.iterdir()) / 1e6:.1f} MB)")


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["tokenizer", "train", "export", "all", "bench", "distill"])
    p.add_argument("--work", default=str(ROOT / "build/train"), help="checkpoints and caches")
    p.add_argument("--out", default=str(ROOT / "models"))
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", default="", help="bench: one model")
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--sequences", type=int, default=1536, help="distill: target continuations")
    p.add_argument("--prompt-weight", type=float, default=0.25,
                   help="distill: KL weight of the prompt positions (continuation: 1)")
    p.add_argument("--hard-weight", type=float, default=0.25,
                   help="distill: weight of the cross-entropy on the target's greedy tokens")
    p.add_argument("--generate-bin", default=str(ROOT / "build/release/bin/edgellm-generate"))
    a = p.parse_args(argv)
    work, out = Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    tok_path = work / "tokenizer.json"
    if a.stage == "distill" and not tok_path.exists():  # a fresh clone: the bundled tokenizer
        tok_path = out / "kjv-target-fp16" / "tokenizer.json"
    train_books, held_books = read_bible()

    if a.stage == "bench":
        torch.set_num_threads(a.threads)
        rng = np.random.default_rng(0)
        fake = rng.integers(0, VOCAB_SIZE, size=200000).astype(np.int32)
        for name, m in make_models().items():
            if a.only and name != a.only:
                continue
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
            for i in range(12):
                if i == 2:
                    t0 = time.time()
                x, y = batch_at(fake, rng, a.batch)
                loss = F.cross_entropy(m(x).reshape(-1, VOCAB_SIZE), y.reshape(-1))
                opt.zero_grad()
                loss.backward()
                opt.step()
            tps = 10 * a.batch * SEQ_LEN / (time.time() - t0)
            print(f"{name}: {m.n_params() / 1e6:.2f} M params, {tps:.0f} training tok/s")
        return 0

    if a.stage in ("tokenizer", "all") and not tok_path.exists():
        t0 = time.time()
        doc = build_tokenizer(train_books)
        tok_path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"tokenizer: {len(doc['model']['vocab']) + len(SPECIALS)} tokens, {time.time() - t0:.0f}s")
    if a.stage == "tokenizer":
        return 0
    tok = load_ref_tokenizer(tok_path)
    eot = VOCAB_SIZE - len(SPECIALS)
    cache = work / "ids.npz"
    if not cache.exists():
        t0 = time.time()
        np.savez(cache, train=encode_books(tok, train_books), held=encode_books(tok, held_books))
        print(f"encoded the text in {time.time() - t0:.0f}s")
    ids = np.load(cache)
    train_ids, held_ids = ids["train"], ids["held"]
    print(f"train {len(train_ids)} tokens, held-out {len(held_ids)} tokens")

    if a.stage == "distill":
        seqs = generate_onpolicy(a, train_ids, work, out)
        draft, info = distill_draft(a, seqs, held_ids, out)
        export(draft, "kjv-draft", out, tok_path, eot)
        log_path = out / "train_log.json"
        summary = json.loads(log_path.read_text())
        summary["draft_distill"] = info
        log_path.write_text(json.dumps(summary, indent=1) + "\n")
        return 0
    if a.stage in ("train", "all"):
        models, log = train(a, train_ids, held_ids)
    else:
        s = torch.load(work / "checkpoint.pt")
        models = make_models()
        for n in models:
            models[n].load_state_dict(s["models"][n])
        log = s["log"]
    if a.stage in ("export", "all"):
        out.mkdir(parents=True, exist_ok=True)
        for name, m in models.items():
            export(m, name, out, tok_path, eot)
        (out / "kjv-heldout.txt").write_text("".join(held_books), encoding="utf-8")
        summary = {"models": {n: {"params": m.n_params(), **MODELS[n]} for n, m in models.items()},
                   "vocab_size": VOCAB_SIZE, "seq_len": SEQ_LEN, "batch": a.batch,
                   "steps": a.steps, "lr": a.lr, "train_tokens": int(len(train_ids)),
                   "heldout_tokens": int(len(held_ids)), "log": log}
        (out / "train_log.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
