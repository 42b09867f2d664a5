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
expect "--choose: fits as given" 0 '"chosen":\{"lm_head":"int8","kv_type":"int8","context_size":2048,"note":"the settings fit as given"' -- "$bin" --model "$model" --context 2048 --budget 1GiB --choose
# Below the default int8 lm_head's peak, where int4 fits alone: the lm_head changes, nothing else.
expect "--choose: the lm_head first" 0 '"chosen":\{"lm_head":"int4","kv_type":"int8","context_size":2048,"note":"to fit the budget of 11.4 MiB: lm_head int8 -> int4 \(peak [0-9.]+ MiB -> [0-9.]+ MiB\)"' -- "$bin" --model "$model" --budget 12000000 --choose
# Below every lm_head at int8 KV: the int8 lm_head reaches it with int4 KV and a shorter context.
expect "--choose: then the KV type, the context last" 0 '"chosen":\{"lm_head":"int8","kv_type":"int4","context_size":[0-9]+,"note":"to fit the budget of 9.8 MiB: KV int8 -> int4 [^;]*; context 2048 -> [0-9]+ tokens' -- "$bin" --model "$model" --budget 10276045 --choose
expect "--choose: a --kv-type given stays" 0 '"chosen":\{"lm_head":"int8","kv_type":"f32","context_size":[0-9]+,"note":"to fit the budget of 12.0 MiB: context 2048 -> ' -- "$bin" --model "$model" --kv-type f32 --budget 12MiB --choose
expect "--choose: nothing fits" 1 "nothing fits the budget of 1.0 MiB" -- "$bin" --model "$model" --budget 1MiB --choose
expect "--choose without a budget" 2 "--choose needs --budget" -- "$bin" --model "$model" --choose
expect "no model" 2 "no model" -- "$bin"
expect "bad kv type" 2 "kv-type" -- "$bin" --model "$model" --kv-type int3
expect "bad budget" 2 "budget" -- "$bin" --model "$model" --budget lots
expect "--measure --decode: decoded one at a time, timed" 0 '"decoded_tokens":8,"decode_tokens_per_s":[1-9]' -- "$bin" --model "$model" --context 64 --measure --decode 8
expect "--decode without --measure" 2 "--decode needs --measure" -- "$bin" --model "$model" --decode 8
expect "the phone budget" 0 '"budget":\{"bytes":4080218931,"fits":true' -- "$bin" --model "$model" --budget phone --meminfo "$src/tests/data/meminfo/linux-6.1.txt"
expect "shrink without a budget" 2 "needs --budget" -- "$bin" --model "$model" --shrink-context-to-fit
expect "unknown option" 2 "unknown argument" -- "$bin" --model "$model" --frobnicate
expect "missing directory" 1 "not a directory" -- "$bin" --model "$src/no-such-model"

finish
