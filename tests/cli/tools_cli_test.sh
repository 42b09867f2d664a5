#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# edgellm-logits and edgellm-tokenize on bad input (docs/bad_inputs.md): --threads beyond the
# cap, devices where files belong, and output lost on a closed or full stdout, each a message on
# stderr and a non-zero exit.
#   tools_cli_test.sh LOGITS_BIN TOKENIZE_BIN SOURCE_DIR
set -uo pipefail
logits=$1
tokenize=$2
model="$3/models/kjv-draft-awq"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
EXPECT_STREAM=stderr  # the tools' messages; stdout is their data


expect "logits --threads 100000" 2 "--threads: '100000' is not an integer in \[1, " -- "$logits" --model "$model" --ids 1,2 --out - --threads 100000
expect "logits --allow-extra-tensors is a flag" 0 "" -- "$logits" --model "$model" --ids 1,2 --out - --allow-extra-tensors
# Progress only for a stage that runs over a second: this load takes a fraction of one.
err=$("$logits" --model "$model" --ids 1,2 --out - 2>&1 >/dev/null)
if [ $? = 0 ] && ! grep -qE '^[a-z0-9 ]+: +[0-9]+%$' <<<"$err"; then
  ok "logits: a quick load draws no progress"
else
  fail "logits: progress of a quick load" "$err"
fi
expect "logits --quiet: nothing on stderr" 0 "^$" -- "$logits" --model "$model" --ids 1,2 --out - --quiet
expect "logits --lm-head int3" 2 "--lm-head: 'int3' is not f16, int8 or int4" -- "$logits" --model "$model" --ids 1,2 --out - --lm-head int3
# The ids against config.json, before the load: more than max_position_embeddings (2048) only
# with --force-context; an id outside vocab_size.
ids3000=$(seq -s, 1 3000)
expect "logits: 3000 ids above max_position_embeddings" 2 "--ids: a prompt of 3000 ids is above the model's max_position_embeddings 2048 .*--force-context" -- "$logits" --model "$model" --ids "$ids3000" --out -
expect "logits: ... with --force-context" 0 "^$" -- "$logits" --model "$model" --ids "$ids3000" --out - --quiet --force-context
expect "logits: an id beyond vocab_size" 1 "--ids: id 4096 \(item 2\) is out of range: the model's vocab_size is 4096" -- "$logits" --model "$model" --ids 1,4096 --out -

# --lm-head: f16 is the stored tensor (its alias as_stored, the library's default) bit for bit
# (the JSON holds each float's shortest round trip); int8 (the default) and int4 differ from it.
lm_out() { "$logits" --model "$model" --ids 1,2,3 --out - --quiet "$@" 2>&1; }
lm_f16=$(lm_out --lm-head f16)
for pair in "as_stored:f16" "int8:" "int4:"; do
  flag=${pair%%:*} want=${pair#*:}
  got=$(lm_out --lm-head "$flag")
  if { [ -n "$want" ] && [ "$got" = "$lm_f16" ]; } || { [ -z "$want" ] && [ "$got" != "$lm_f16" ] && [ -n "$got" ]; }; then
    echo "ok   logits --lm-head $flag $([ -n "$want" ] && echo equals || echo differs from) f16"
  else
    fail "logits --lm-head $flag vs f16" "$got"
  fi
done
if [ "$(lm_out)" = "$(lm_out --lm-head int8)" ]; then
  echo "ok   logits: the default lm_head is int8"
else
  fail "logits: the default lm_head is int8"
fi
expect "tokenize --tokenizer /dev/zero" 1 "is a character device, not a regular file" -- "$tokenize" --tokenizer /dev/zero --text hi
if [ -e /dev/full ]; then
  expect "logits --out - on a full disk" 1 "write to '-' failed" -- bash -c "\"$logits\" --model \"$model\" --ids 1,2 --out - >/dev/full"
  expect "tokenize on a full disk" 1 "error writing to stdout: No space left on device" -- bash -c "\"$tokenize\" --tokenizer \"$model\" --text hello >/dev/full"
fi
expect "tokenize with stdout closed" 1 "error writing to stdout" -- bash -c "\"$tokenize\" --tokenizer \"$model\" --text hello >&-"

# --chat: the checkpoint's chat_template (here Llama 3's, from the fixtures), the ChatML fallback
# with a warning, the template's own error, a usage error.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]\n' >"$tmp/chat.json"
printf '[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]\n' >"$tmp/bad.json"
mkdir -p "$tmp/llama3" "$tmp/gemma3"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); json.dump({"chat_template": d["chat_template"], "bos_token": d["bos_token"]}, open(sys.argv[2], "w"))' \
  "$3/tests/data/chat_templates/llama3.json" "$tmp/llama3/tokenizer_config.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); json.dump({"chat_template": d["chat_template"], "bos_token": d["bos_token"]}, open(sys.argv[2], "w"))' \
  "$3/tests/data/chat_templates/gemma3.json" "$tmp/gemma3/tokenizer_config.json"
want='"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"'
if [ "$("$tokenize" --tokenizer "$tmp/llama3" --chat "$tmp/chat.json" --add-generation-prompt)" = "$want" ]; then
  echo "ok   tokenize --chat renders the chat_template"
else
  echo "FAIL tokenize --chat renders the chat_template"
  failures=$((failures + 1))
fi
expect "tokenize --chat without a template" 0 "no chat_template .* using ChatML" -- "$tokenize" --tokenizer "$model" --chat "$tmp/chat.json"
expect "tokenize --chat, roles not alternating" 1 "line 19, column 12: the template raised an exception: Conversation roles must alternate" -- "$tokenize" --tokenizer "$tmp/gemma3" --chat "$tmp/bad.json"
expect "tokenize --add-generation-prompt without --chat" 2 "needs --chat" -- "$tokenize" --tokenizer "$model" --text hi --add-generation-prompt

finish
