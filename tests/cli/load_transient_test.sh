#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The load transient: loading never holds much more than the loaded model. On Qwen2-0.5B's
# shapes (hidden 896, vocab 151936: a 272 MB fp16 token table; 4 of its 24 layers, the
# conversions at load being the point), for an AutoAWQ checkpoint with its own lm_head and an
# fp16 one with a tied embedding quantised to int4 at load, and every lm_head format (f16 as
# stored, int8, int4): edgellm-plan --measure's VmHWM after loading is at most 64 MiB above
# VmRSS right after it, and the plan's own load peak at most 64 MiB above its resident weights.
#   load_transient_test.sh PLAN_BIN SOURCE_DIR WORK_DIR
set -uo pipefail
plan=$1
src=$2
work=$3
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
limit=$((64 << 20))

make() {  # make NAME ARGS...: a checkpoint under WORK_DIR, kept between runs
  local dir="$work/$1"
  shift
  if [ ! -f "$dir/config.json" ]; then
    rm -rf "$dir"
    /usr/bin/python3 "$src/tools/make_checkpoint.py" --out "$dir" --preset qwen2-0.5b --layers 4 \
      "$@" >/dev/null || { fail "make_checkpoint $*"; return 1; }
  fi
}
make awq-untied --untie-embeddings || exit 1
make fp16-tied --awq none || exit 1

for model in awq-untied fp16-tied; do
  for head in f16 int8 int4; do
    name="$model, lm_head $head"
    out=$("$plan" -m "$work/$model" --no-tokenizer -c 64 --lm-head "$head" --measure 2>&1)
    if [ $? != 0 ]; then
      fail "$name: edgellm-plan --measure" "$out"
      continue
    fi
    read -r loaded peak planned_resident planned_peak < <(/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1]); m = d["measured"]; w = d["weights"]
print(m["loaded_rss_bytes"], m["load_peak_rss_bytes"], w["resident_bytes"], w["load_peak_bytes"])' "$out")
    detail="measured: loaded $((loaded >> 20)) MiB, peak while loading $((peak >> 20)) MiB; planned: resident $((planned_resident >> 20)) MiB, load peak $((planned_peak >> 20)) MiB"
    if [ $((peak - loaded)) -le $limit ]; then ok "$name: $detail"; else fail "$name: $detail"; fi
    if [ $((planned_peak - planned_resident)) -le $limit ]; then
      ok "$name: the plan's transient"
    else
      fail "$name: the plan's transient: $detail"
    fi
  done
done
finish
