#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# edgellm-plan end to end on the bundled model: the JSON plan, a budget that fits, one that
# refuses (exit 1, the message says what is needed), shrinking, and usage errors (exit 2).
#   plan_cli_test.sh BIN SOURCE_DIR
set -uo pipefail
bin=$1
src=$2
model="$src/models/kjv-target-awq"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


expect "help" 0 "--budget" -- "$bin" --help
expect "json plan" 0 '"peak_bytes":[0-9]+' -- "$bin" --model "$model" --context 512
expect "kv type and context in the plan" 0 '"context_size":512,"kv_type":"f16"' -- "$bin" --model "$model" --context 512 --kv-type f16
expect "a budget that fits" 0 '"fits":true' -- "$bin" --model "$model" --budget 1GiB
expect "a budget below the plan refuses" 1 'needs .* MiB .*budget 1.0 MiB' -- "$bin" --model "$model" --budget 1MiB
expect "shrink the context to fit" 0 '"shrunk":true' -- "$bin" --model "$model" --context 2048 --budget 11MiB --shrink-context-to-fit
expect "a fraction of the available memory" 0 '"fits":true' -- "$bin" --model "$model" --budget 50% --meminfo "$src/tests/data/meminfo/linux-6.1.txt"
expect "text format" 0 'needs .* MiB \(weights' -- "$bin" --model "$model" --format text
expect "no model" 2 "no model" -- "$bin"
expect "bad kv type" 2 "kv-type" -- "$bin" --model "$model" --kv-type int4
expect "bad budget" 2 "budget" -- "$bin" --model "$model" --budget lots
expect "shrink without a budget" 2 "needs --budget" -- "$bin" --model "$model" --shrink-context-to-fit
expect "unknown option" 2 "unknown argument" -- "$bin" --model "$model" --frobnicate
expect "missing directory" 1 "not a directory" -- "$bin" --model "$src/no-such-model"

finish
