#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# edgellm-quantize on the bundled target with a short slice of a training book (Genesis 1-11,
# never the held-out books): AWQ to the gemm layout and RTN with --fake-quant, both load and
# score in edgellm-perplexity; and each bad input (exit 2 on usage errors, 1 on the others, the
# message naming the flag or file), never leaving an output directory behind.
#   quantize_cli_test.sh QUANTIZE_BIN PERPLEXITY_BIN SOURCE_DIR
set -uo pipefail
bin=$1
ppl=$2
src=$3
fp16="$src/models/kjv-target-fp16"
calib="$src/tests/data/calib/genesis-1-11.txt"
text="$src/models/kjv-heldout.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

small=(--samples 1 --seqlen 128 --quiet)
expect "awq gemm" 0 '^$' -- "$bin" -m "$fp16" --calib "$calib" --out "$tmp/awq" "${small[@]}"
grep -q '"quant_method":"awq"' "$tmp/awq/config.json" && ok "quantization_config" ||
  fail "quantization_config" "$(cat "$tmp/awq/config.json")"
[ -f "$tmp/awq/tokenizer.json" ] && ok "tokenizer copied" || fail "tokenizer copied"
expect "awq output scores" 0 '"ppl":[0-9]' -- "$ppl" -m "$tmp/awq" --text "$text" \
  --max-tokens 128 --ctx 64 --quiet --format json
expect "awq --rounding nearest --clip (AutoAWQ's steps)" 0 '^$' -- "$bin" -m "$fp16" \
  --calib "$calib" --out "$tmp/near" --rounding nearest --clip "${small[@]}"
cmp -s "$tmp/awq/model.safetensors" "$tmp/near/model.safetensors" &&
  fail "the default (compensated) differs from nearest" ||
  ok "the default (compensated) differs from nearest"
expect "nearest output scores" 0 '"ppl":[0-9]' -- "$ppl" -m "$tmp/near" --text "$text" \
  --max-tokens 128 --ctx 64 --quiet --format json
expect "rtn --fake-quant --bits 3" 0 '^$' -- "$bin" -m "$fp16" --calib "$calib" \
  --out "$tmp/rtn3" --method rtn --bits 3 --fake-quant "${small[@]}"
expect "fake-quant output scores" 0 '"ppl":[0-9]' -- "$ppl" -m "$tmp/rtn3" --text "$text" \
  --max-tokens 128 --ctx 64 --quiet --format json --fp32-reference

expect "attention int8, down_proj fp16" 0 '^$' -- "$bin" -m "$fp16" --calib "$calib" \
  --out "$tmp/mix" --method rtn --modules-bits self_attn=8,down_proj=16 "${small[@]}"
grep -q '"edgellm_int8_modules":\["self_attn.q_proj","self_attn.k_proj","self_attn.v_proj","self_attn.o_proj"\]' \
  "$tmp/mix/config.json" && grep -q '"modules_to_not_convert":\["mlp.down_proj"\]' "$tmp/mix/config.json" &&
  ok "mixed quantization_config" || fail "mixed quantization_config" "$(cat "$tmp/mix/config.json")"
expect "mixed output scores" 0 '"ppl":[0-9]' -- "$ppl" -m "$tmp/mix" --text "$text" \
  --max-tokens 128 --ctx 64 --quiet --format json

expect "missing --calib" 2 'calib FILE is required' -- "$bin" -m "$fp16" --out "$tmp/x"
expect "bad --method" 2 "--method: 'gptq'" -- "$bin" -m "$fp16" --calib "$calib" --out "$tmp/x" \
  --method gptq
expect "bad --rounding" 2 "--rounding: 'up'" -- "$bin" -m "$fp16" --calib "$calib" \
  --out "$tmp/x" --rounding up
expect "--bits 3 without --fake-quant" 2 'fake-quant' -- "$bin" -m "$fp16" --calib "$calib" \
  --out "$tmp/x" --bits 3
expect "--modules-bits not P=B" 2 "'mlp' is not PATTERN=BITS" -- "$bin" -m "$fp16" --calib "$calib" \
  --out "$tmp/x" --modules-bits self_attn=8,mlp
expect "--modules-bits 3 without --fake-quant" 2 'mlp=3: only 4, 8 and 16 bits' -- "$bin" \
  -m "$fp16" --calib "$calib" --out "$tmp/x" --modules-bits mlp=3
expect "--modules-bits matching nothing" 1 "pattern 'attn_q' matches none" -- "$bin" -m "$fp16" \
  --calib "$calib" --out "$tmp/x" --modules-bits attn_q=8 --quiet
expect "existing --out" 1 "exists.*--force" -- "$bin" -m "$fp16" --calib "$calib" \
  --out "$tmp/awq" "${small[@]}"
expect "short --calib" 1 "genesis-1-11.txt.*tokens, fewer than one calibration block" -- \
  "$bin" -m "$fp16" --calib "$calib" --out "$tmp/x" --seqlen 100000 --quiet
expect "group not dividing" 1 "group: 100 does not divide" -- "$bin" -m "$fp16" --calib "$calib" \
  --out "$tmp/x" --group 100 --quiet
expect "already quantised" 1 "already quantised" -- "$bin" -m "$src/models/kjv-target-awq" \
  --calib "$calib" --out "$tmp/x" --quiet
expect "missing --calib file" 1 "no-such.txt" -- "$bin" -m "$fp16" --calib "$tmp/no-such.txt" \
  --out "$tmp/x"
# A full disk: the file size limit (SIGXFSZ ignored, so write() fails with EFBIG) stops the
# weights' write part way; the error names the file and nothing that looks complete is left.
full_disk=(bash -c 'ulimit -f 2048; trap "" XFSZ; exec "$@"' full_disk)
expect "full disk" 1 "model.safetensors" -- "${full_disk[@]}" "$bin" -m "$fp16" --calib "$calib" \
  --out "$tmp/x" "${small[@]}"
# Out of memory: address-space limits from where the checkpoint cannot even be mapped up to where
# the run fits. Every run ends with an exit status, never a signal; a failing one names either the
# file it could not map or, once the run gets that far, the checkpoint and layer it was in. At
# least one limit must land inside the quantisation. (Sanitizer builds reserve terabytes of
# shadow memory: skipped there.)
if ldd "$bin" 2>/dev/null | grep -qE 'lib(asan|tsan)'; then
  ok "out of memory: skipped (sanitizer build)"
else
  oom_named=0 oom_bad=""
  for kb in $(seq 40000 4000 112000); do
    err=$(bash -c 'ulimit -v "$1"; shift; exec "$@"' oom "$kb" "$bin" -m "$fp16" --calib "$calib"       --out "$tmp/x" "${small[@]}" 2>&1 >/dev/null)
    rc=$?
    rm -rf "$tmp/x"
    if [ $rc = 0 ]; then continue; fi
    if [ $rc = 1 ] && grep -q "\[quantize_model\] out of memory (quantising $fp16, .*layer" <<<"$err"; then
      oom_named=$((oom_named + 1))
    elif [ $rc != 1 ] || ! grep -qE "cannot (mmap|allocate)|out of memory" <<<"$err"; then
      oom_bad+="ulimit -v $kb: exit $rc: $err"$'\n'
    fi
  done
  if [ -z "$oom_bad" ] && [ $oom_named -gt 0 ]; then
    ok "out of memory: $oom_named limits fail inside quantize_model, naming the checkpoint and layer"
  else
    fail "out of memory ($oom_named runs named the layer)" "$oom_bad"
  fi
fi
[ ! -e "$tmp/x" ] && ok "no output left by failures" || fail "no output left by failures" "$(ls -la "$tmp")"
[ -z "$(ls "$tmp" | grep tmp)" ] && ok "no temporary directory left" || fail "temporary left" "$(ls "$tmp")"
finish
