#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# edgellm-logits --backend vulkan (lavapipe in CI) against the CPU's exact path with the stored
# lm_head on the fixtures (Llama, Qwen2, Qwen3, SmolLM3; fp16 quantised at load and AutoAWQ int4): every
# position within 1e-2 of that position's logit range; edgellm-generate --backend vulkan
# streams the CPU's text (greedy, f16 KV, fp16 lm_head) on the bundled model, with a draft and
# a prompt cache too; and the refusals of both. Exit 77 (skipped) where the host has no Vulkan
# device.
#   vulkan_cli_test.sh LOGITS_BIN SOURCE_DIR GENERATE_BIN
set -uo pipefail
logits=$1
src=$2
generate=$3
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

probe=$("$logits" --model "$src/models/kjv-draft-awq" --ids 1 --out - --backend vulkan --quiet 2>&1 >/dev/null)
if grep -q "no Vulkan" <<<"$probe"; then
  echo "SKIPPED: $probe"
  exit 77
fi

for f in llama-awq-gemm qwen2-awq-gemm qwen3-awq-gemm smollm3-awq-gemm llama-fp16 qwen2-fp16 qwen3-fp16 \
    smollm3-fp16; do
  dir="$src/tests/data/model/$f"
  ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["ids"])))' "$dir/expected.json")
  if ! "$logits" --model "$dir" --ids "$ids" --all-positions --out "$tmp/vk.json" --backend vulkan --quiet 2>"$tmp/err"; then
    fail "logits --backend vulkan on $f" "$(cat "$tmp/err")"
    continue
  fi
  "$logits" --model "$dir" --ids "$ids" --all-positions --out "$tmp/cpu.json" --exact --lm-head f16 --quiet
  worst=$(python3 - "$tmp/vk.json" "$tmp/cpu.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["mode"] == "int4-vulkan", a["mode"]
worst = 0.0
for ra, rb in zip(a["logits"], b["logits"], strict=True):
    worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb, strict=True)) / (max(rb) - min(rb)))
print(f"{worst:.2e}")
PY
)
  if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-2 else 1)" "$worst"; then
    ok "logits --backend vulkan on $f: worst |diff| $worst of the logit range"
  else
    fail "logits --backend vulkan on $f: worst |diff| $worst of the logit range (> 1e-2)"
  fi
done

# edgellm-generate --backend vulkan: greedy text with a draft model, with prompt lookup, and
# through a prompt cache (written, then read) is the plain decode's. (The device against the
# CPU's exact path: tests/backend/vulkan/backend_test.cpp.)
gen=(--model "$src/models/kjv-target-awq" --prompt "And God said" -n 16 --temperature 0 --kv-type f16 --quiet)
if ! plain=$("$generate" "${gen[@]}" --backend vulkan 2>"$tmp/err") || [ -z "$plain" ]; then
  fail "generate --backend vulkan" "$(cat "$tmp/err")"
fi
for extra in "--draft $src/models/kjv-draft-awq" "--draft lookup" "--prompt-cache $tmp/prompt.bin" "--prompt-cache $tmp/prompt.bin"; do
  # shellcheck disable=SC2086  # $extra is a flag and its value
  if text=$("$generate" "${gen[@]}" --backend vulkan $extra 2>"$tmp/err") && [ "$text" = "$plain" ]; then
    ok "generate --backend vulkan $extra: the plain decode's text"
  else
    fail "generate --backend vulkan $extra" "plain: $plain | got: ${text:-} | $(cat "$tmp/err")"
  fi
done
[ -s "$tmp/prompt.bin" ] && ok "generate --backend vulkan wrote the prompt cache" || fail "no prompt cache written"
# --vk-gemv int8: the decode GEMVs on W4A8 (its greedy text may part from the fp32 decode's;
# its logits against the CPU: backend_test.cpp).
if text=$("$generate" "${gen[@]}" --backend vulkan --vk-gemv int8 --greedy 2>"$tmp/err") && [ -n "$text" ]; then
  ok "generate --backend vulkan --vk-gemv int8 --greedy prints text"
else
  fail "generate --backend vulkan --vk-gemv int8 --greedy" "$(cat "$tmp/err")"
fi
# The device it picked is named on stderr; a CPU implementation (lavapipe here) is warned about.
dev_args=(--model "$src/models/kjv-draft-awq" -n 2 --kv-type f16 --backend vulkan)
err=$("$generate" "${dev_args[@]}" 2>&1 >/dev/null)
device=$(grep -E '^Vulkan device [0-9]+: .+ \((discrete GPU|integrated GPU|virtual GPU|CPU|other)\)$' <<<"$err")
warned=$(grep -c "warning: Vulkan device '.*' is a CPU implementation; --backend cpu is faster" <<<"$err")
want_warning=0
[[ "$device" == *"(CPU)" ]] && want_warning=1
if [ -n "$device" ] && [ "$warned" = "$want_warning" ]; then
  ok "generate vulkan: names the device ($device), warns for a CPU implementation"
else
  fail "generate vulkan: the device note" "$err"
fi
err=$("$generate" "${dev_args[@]}" --quiet 2>&1 >/dev/null)
if ! grep -q "^Vulkan device" <<<"$err"; then ok "generate vulkan --quiet: no device line"; else fail "--quiet device line" "$err"; fi

EXPECT_STREAM=stderr
expect "generate vulkan: --kv-type f32 has no device format" 1 "f32.*--backend cpu" -- "$generate" "${gen[@]}" --backend vulkan --kv-type f32
expect "generate vulkan: --kv-type int4 has no device format" 1 "kv_type int4: the device caches hold int8 or f16; choose one of them \(run with --backend cpu\)" -- "$generate" "${gen[@]}" --backend vulkan --kv-type int4
expect "generate vulkan: a device index past the last" 1 "device.*--backend cpu" -- "$generate" "${gen[@]}" --backend vulkan --device 99
expect "generate: --device without --backend vulkan" 2 "--device: applies to --backend vulkan only" -- "$generate" "${gen[@]}" --device 0
expect "generate vulkan: --vk-gemv with a bad value" 2 "--vk-gemv: 'fp16' is not auto, fp32, int8 or int8-dot" -- "$generate" "${gen[@]}" --backend vulkan --vk-gemv fp16
expect "generate: --vk-gemv without --backend vulkan" 2 "--vk-gemv: applies to --backend vulkan only" -- "$generate" "${gen[@]}" --vk-gemv int8
expect "generate vulkan: --fp32-reference is CPU only" 2 "CPU only" -- "$generate" "${gen[@]}" --backend vulkan --fp32-reference
expect "vulkan: a bf16 lm_head is refused with a way out" 1 "BF16.*--lm-head int4" -- "$logits" --model "$src/tests/data/model/llama-bf16" --ids 1,2 --out - --backend vulkan --quiet
expect "vulkan: --lm-head int4 runs the bf16 checkpoint" 0 "^$" -- "$logits" --model "$src/tests/data/model/llama-bf16" --ids 1,2 --out - --backend vulkan --lm-head int4 --quiet
expect "vulkan: --lm-head int8 has no shader" 1 "int8.*--lm-head f16" -- "$logits" --model "$src/models/kjv-draft-awq" --ids 1,2 --out - --backend vulkan --lm-head int8 --quiet
expect "vulkan: a device index past the last" 1 "device.*--backend cpu" -- "$logits" --model "$src/models/kjv-draft-awq" --ids 1,2 --out - --backend vulkan --device 99 --quiet
expect "vulkan: --backend gpu" 2 "--backend: 'gpu' is not one of 'cpu', 'vulkan'" -- "$logits" --model "$src/models/kjv-draft-awq" --ids 1 --out - --backend gpu
expect "vulkan: --fp32-reference is CPU only" 2 "CPU only" -- "$logits" --model "$src/models/kjv-draft-awq" --ids 1 --out - --backend vulkan --fp32-reference
finish
