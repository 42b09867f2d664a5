#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/) from the fixtures
under tests/data. The prompt- and packed-cache seeds depend on a model's bytes, so the targets
write those themselves: pass --bin-dir with the built fuzz binaries (scripts/fuzz.sh builds them
into build/fuzz) to refresh them too.

    tools/make_fuzz_seeds.py [--bin-dir build/fuzz/bin]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")

TOKENIZERS = ["gpt2_bytelevel", "llama3_bytelevel_pairs", "qwen2_bytelevel",
              "llama2_sentencepiece", "metaspace_pairs"]  # order of kKinds in the target


def fresh(target):
    """Empties corpus/<target>/, keeping regression_* files (inputs that once found a bug)."""
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if not f.startswith("regression_"):
            os.remove(os.path.join(d, f))
    return d


def write(d, name, data):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(name_index, data):
    """One record of the checkpoint_dir framing (tests/fuzz/fuzz_support.hpp, unframe)."""
    return bytes([name_index]) + struct.pack("<I", len(data)) + data


def read(*parts):
    with open(os.path.join(*parts), "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", help="directory of the built edgellm_fuzz_* binaries")
    args = ap.parse_args()

    d = fresh("tokenizer_json")
    for t in TOKENIZERS:
        shutil.copy(os.path.join(DATA, "tokenizer", t + ".json"), d)

    # tokenizer_roundtrip: byte 0 = tokenizer, byte 1 = options (0: the lossless check), text.
    d = fresh("tokenizer_roundtrip")
    texts = json.load(open(os.path.join(DATA, "tokenizer", "corpus.json"), encoding="utf-8"))
    picks = [t for t in texts if 0 < len(t.encode()) <= 200][:12]
    for k in range(len(TOKENIZERS)):
        for i, t in enumerate(picks):
            flags = [0, 3, 4][i % 3]  # lossless check / specials on / skip_special
            write(d, "k%d_%02d" % (k, i), bytes([k, flags]) + t.encode())
        write(d, "k%d_ids" % k, bytes([k, 8]) + struct.pack("<8h", 0, 1, 2, 3, 200, 300, -1, 999))

    # sharded_index: the fixture's index and a few variants.
    d = fresh("sharded_index")
    index = json.loads(read(DATA, "model", "qwen2-fp16", "model.safetensors.index.json"))
    write(d, "index.json", json.dumps(index, indent=2).encode())
    wm = index["weight_map"]
    names = sorted(wm)
    moved = dict(wm)
    moved[names[0]] = "model-00002-of-00003.safetensors"
    write(d, "wrong_shard.json", json.dumps({"weight_map": moved}).encode())
    write(d, "subset.json", json.dumps({"weight_map": {n: wm[n] for n in names[:4]}}).encode())
    write(d, "path.json", json.dumps({"weight_map": {names[0]: "../model.safetensors"}}).encode())
    write(d, "empty.json", b'{"metadata": {"total_size": 1}, "weight_map": {}}')

    # checkpoint_dir: framed directories (file indices as kFiles in the target).
    d = fresh("checkpoint_dir")
    tok = read(DATA, "tokenizer", "metaspace_pairs.json")  # 289 tokens, fits vocab_size 300
    md = os.path.join(DATA, "model", "llama-awq-gemm")
    write(d, "llama-awq-gemm", frame(0, read(md, "config.json")) +
          frame(1, read(md, "generation_config.json")) + frame(2, read(md, "model.safetensors")) +
          frame(3, tok))
    md = os.path.join(DATA, "model", "qwen2-awq-gemm")  # no weights: small, reaches the errors
    write(d, "qwen2-no-weights", frame(0, read(md, "config.json")) + frame(3, tok))

    # chat_template: byte 0 = options (bit 0 add_generation_prompt, then the conversation), the
    # rest a real template from tests/data/chat_templates.
    d = fresh("chat_template")
    tdir = os.path.join(DATA, "chat_templates")
    for i, f in enumerate(sorted(x for x in os.listdir(tdir) if x.endswith(".json"))):
        fixture = json.load(open(os.path.join(tdir, f), encoding="utf-8"))
        write(d, f[:-5] + ".jinja", bytes([(i * 2 + 1) % 6]) + fixture["chat_template"].encode())

    if args.bin_dir:
        for t in ["prompt_cache", "packed_cache"]:
            d = fresh(t)
            env = dict(os.environ, EDGELLM_FUZZ_WRITE_SEEDS=d)
            subprocess.run([os.path.join(args.bin_dir, "edgellm_fuzz_" + t)], env=env, check=True)
    for t in sorted(os.listdir(CORPUS)):
        p = os.path.join(CORPUS, t)
        size = sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p))
        print("%-22s %3d files %8d bytes" % (t, len(os.listdir(p)), size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
