#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates tests/data/model/: tiny random-weight HF checkpoints (tools/make_checkpoint.py) and
# their expected logits from the independent PyTorch reference (tools/reference_forward.py).
#
# Usage: tools/make_test_fixtures.sh [OUT_DIR [NAME...]]   (default: tests/data/model, all)
# With NAMEs only those fixtures are (re)written, the others are left as they are.
# Needs Debian's python3 with python3-numpy and python3-torch (PYTHON=... to override).
# Deterministic: the weights come from fixed seeds, the reference runs single-threaded in fp32,
# and the logits are written as the shortest decimal that reads back as the same fp32 value.
#
# Fixtures (all with max_position_embeddings 128, vocabulary 300, init std 0.15 so that attention
# scores are O(1) and RoPE / masking errors show in the logits):
#   llama-fp16       llama, hidden 64, 2 layers, 4 heads / 2 kv heads (GQA 2), intermediate 192,
#                    untied lm_head, fp16, one file
#   llama-bf16       the same shape with 1 layer, bf16 (bf16 embedding / lm_head / RTN paths),
#                    llama3 RoPE scaling (factor 8, low 1, high 4, original context 32: its
#                    16 frequencies fall in all three bands)
#   llama-awq-gemm   llama-fp16's weights as AutoAWQ gemm, group 64 (RTN codes)
#   llama-awq-gemv   the same as AutoAWQ gemv, group 64
#   qwen2-fp16       qwen2 (q/k/v bias), hidden 96, 2 layers, 6 heads / 2 kv heads (GQA 3),
#                    intermediate 192, tied embeddings, fp16, sharded into 3 files
#   qwen2-awq-gemm   qwen2-fp16's weights as AutoAWQ gemm, group 32
#   qwen3-fp16       qwen3 (per-head q/k RMSNorm, no biases), hidden 64, 2 layers, 4 heads /
#                    2 kv heads, head_dim 32 (heads * head_dim = 128 != hidden), intermediate
#                    192, tied embeddings, fp16, one file
#   qwen3-awq-gemm   qwen3-fp16's weights as AutoAWQ gemm, group 64 (q/k_norm stay fp16)
#   smollm3-fp16     smollm3 (the Llama layout; layer 1 of 2 NoPE: no_rope_layers [1, 0]),
#                    hidden 64, 4 heads / 1 kv head (GQA 4), intermediate 192, tied
#                    embeddings, fp16, one file
#   smollm3-awq-gemm smollm3-fp16's weights as AutoAWQ gemm, group 64
# Each directory gets expected.json: {"ids", "vocab_size", "dtype", "logits": [12][300] (every
# position), "greedy": [32 ids]} for the prompt IDS below; AWQ references are computed on the
# dequantised weights fp16((q - z) * s).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/tests/data/model}"
ONLY=("${@:2}")
PYTHON="${PYTHON:-/usr/bin/python3}"
IDS="1,17,42,99,150,299,0,7,7,256,33,12"
GREEDY=32
export OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1

mkdir -p "$OUT"

make_ckpt() {  # name, make_checkpoint.py arguments...
  local name="$1"
  shift
  if ((${#ONLY[@]})) && [[ " ${ONLY[*]} " != *" $name "* ]]; then return 0; fi
  rm -rf "${OUT:?}/$name"
  "$PYTHON" "$ROOT/tools/make_checkpoint.py" --out "$OUT/$name" --vocab 300 --max-pos 128 \
    --init-std 0.15 "$@" >/dev/null
  "$PYTHON" "$ROOT/tools/reference_forward.py" --model "$OUT/$name" --ids "$IDS" \
    --all-positions --greedy "$GREEDY" --threads 1 --out "$OUT/$name/expected.json" 2>/dev/null
  # Rewrite the logits (fp32 values printed as doubles) as their shortest fp32 decimal.
  "$PYTHON" - "$OUT/$name/expected.json" <<'EOF'
import json, sys
import numpy as np
path = sys.argv[1]
with open(path) as f:
    d = json.load(f)
rows = [", ".join(np.format_float_positional(np.float32(v), unique=True, trim="0")
                  for v in row) for row in d["logits"]]
head = {k: d[k] for k in ("ids", "vocab_size", "dtype", "greedy")}
with open(path, "w") as f:
    f.write("{" + ", ".join(f'"{k}": {json.dumps(v)}' for k, v in head.items()))
    f.write(', "logits": [\n' + ",\n".join("[" + r + "]" for r in rows) + "]}\n")
EOF
  echo "wrote $OUT/$name"
}

LLAMA=(--arch llama --hidden 64 --heads 4 --kv-heads 2 --intermediate 192 --untie-embeddings
       --seed 1)
QWEN2=(--arch qwen2 --hidden 96 --layers 2 --heads 6 --kv-heads 2 --intermediate 192
       --tie-embeddings --seed 2)
QWEN3=(--model-type qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32
       --intermediate 192 --tie-embeddings --seed 3)

SMOLLM3=(--model-type smollm3 --hidden 64 --layers 2 --heads 4 --kv-heads 1 --intermediate 192
         --tie-embeddings --no-rope-layers 1,0 --rms-eps 1e-6 --seed 5)

make_ckpt llama-fp16 "${LLAMA[@]}" --layers 2 --dtype fp16
make_ckpt llama-bf16 "${LLAMA[@]}" --layers 1 --dtype bf16 --rope-scaling-llama3 8,1,4,32
make_ckpt llama-awq-gemm "${LLAMA[@]}" --layers 2 --awq gemm --group-size 64 --awq-codes rtn
make_ckpt llama-awq-gemv "${LLAMA[@]}" --layers 2 --awq gemv --group-size 64 --awq-codes rtn
make_ckpt qwen2-fp16 "${QWEN2[@]}" --dtype fp16 --shard-size-mb 0.15
make_ckpt qwen2-awq-gemm "${QWEN2[@]}" --awq gemm --group-size 32 --awq-codes rtn
make_ckpt qwen3-fp16 "${QWEN3[@]}" --dtype fp16
make_ckpt qwen3-awq-gemm "${QWEN3[@]}" --awq gemm --group-size 64 --awq-codes rtn
make_ckpt smollm3-fp16 "${SMOLLM3[@]}" --dtype fp16
make_ckpt smollm3-awq-gemm "${SMOLLM3[@]}" --awq gemm --group-size 64 --awq-codes rtn

du -sh "$OUT"
