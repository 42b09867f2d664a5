#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a Llama-architecture GGUF (fp16 tensors, a synthetic 'llama' vocabulary) from an fp16
checkpoint made by tools/make_checkpoint.py --awq none, so that llama.cpp's llama-quantize and
llama-bench can run the same shape as edgellm-bench (docs/performance.md, "Side by side with
llama.cpp"). Only speed is compared: q/k rows are not permuted to llama.cpp's RoPE order and the
vocabulary is placeholder tokens, so the model's text is meaningless.

Needs llama.cpp's gguf-py on PYTHONPATH (llama.cpp/gguf-py).

    PYTHONPATH=llama.cpp/gguf-py /usr/bin/python3 tools/to_gguf.py CKPT_DIR OUT.gguf
"""
import json
import os
import sys

import numpy as np

import gguf


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F16":
            raise SystemExit(f"{path}: {name}: dtype {t['dtype']}, expected F16 (--awq none)")
        b, e = t["data_offsets"]
        out[name] = data[b:e].view(np.float16).reshape(t["shape"])
    return out


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(src, "config.json")))
    tensors = {}
    for fn in sorted(os.listdir(src)):
        if fn.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(src, fn)))
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    V = cfg["vocab_size"]
    w = gguf.GGUFWriter(dst, "llama")
    w.add_name("edgellm-shape")
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(H // heads)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # Placeholder SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then words.
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    while len(tokens) < V:
        tokens.append(f"\u2581w{len(tokens)}")
        scores.append(-float(len(tokens)))
        types.append(1)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def f32(x):
        return np.ascontiguousarray(x.astype(np.float32))

    w.add_tensor("token_embd.weight", np.ascontiguousarray(tensors["model.embed_tokens.weight"]))
    w.add_tensor("output_norm.weight", f32(tensors["model.norm.weight"]))
    head = tensors.get("lm_head.weight", tensors["model.embed_tokens.weight"])
    w.add_tensor("output.weight", np.ascontiguousarray(head))
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(L):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", f32(tensors[p + "input_layernorm.weight"]))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", f32(tensors[p + "post_attention_layernorm.weight"]))
        for hf, gg in names.items():
            w.add_tensor(f"blk.{i}.{gg}.weight", np.ascontiguousarray(tensors[p + hf + ".weight"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {dst}")


if __name__ == "__main__":
    main()
