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
failures=0

# expect NAME WANT_RC PATTERN -- CMD...: runs CMD (stdin empty, stdout as the caller left it),
# checks the exit code and that stderr matches PATTERN (grep -E).
expect() {
  local name=$1 want=$2 pattern=$3
  shift 4
  local err rc
  err=$( { timeout 60 "$@" </dev/null 2>&1 1>&3 3>&-; } 3>/dev/null)
  rc=$?
  if [ "$rc" = "$want" ] && printf '%s\n' "$err" | grep -Eq -- "$pattern"; then
    echo "ok   $name"
  else
    echo "FAIL $name (exit $rc, wanted $want and /$pattern/):"
    printf '%s\n' "$err" | head -10 | sed 's/^/     /'
    failures=$((failures + 1))
  fi
}

expect "logits --threads 100000" 2 "--threads: 100000 is not in" -- "$logits" --model "$model" --ids 1,2 --out - --threads 100000
expect "logits --allow-extra-tensors is a flag" 0 "" -- "$logits" --model "$model" --ids 1,2 --out - --allow-extra-tensors
expect "tokenize --tokenizer /dev/zero" 1 "is a character device, not a regular file" -- "$tokenize" --tokenizer /dev/zero --text hi
if [ -e /dev/full ]; then
  expect "logits --out - on a full disk" 1 "write to '-' failed" -- bash -c "\"$logits\" --model \"$model\" --ids 1,2 --out - >/dev/full"
  expect "tokenize on a full disk" 1 "error writing to stdout: No space left on device" -- bash -c "\"$tokenize\" --tokenizer \"$model\" --text hello >/dev/full"
fi
expect "tokenize with stdout closed" 1 "error writing to stdout" -- bash -c "\"$tokenize\" --tokenizer \"$model\" --text hello >&-"

echo "$failures failure(s)"
[ $failures = 0 ]
