#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What every edgellm-* command line tool does the same way (cli/common.hpp, cli/flags.hpp, bench/flags.hpp):
# --version (exit 0, the version and the git sha), --help (exit 0), a usage error (exit 2, the
# message naming the flag), and the llama.cpp short flags meaning what the long ones do.
#   flags_cli_test.sh BIN_DIR SOURCE_DIR
set -uo pipefail
bin=$1
src=$2
model="$src/models/kjv-draft-awq"  # the smallest bundled model keeps this fast
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
version=$(sed -nE 's/^#define EDGELLM_VERSION_(MAJOR|MINOR|PATCH) +([0-9]+).*/\2/p' \
  "$src/include/edgellm/config.hpp" | paste -sd.)



# same NAME -- CMD_A... -- CMD_B...: both exit 0 with the same stdout.
same() {
  local name=$1
  shift 2
  local a=() b=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  local out_a out_b rc_a rc_b
  out_a=$(timeout 60 "${a[@]}" 2>/dev/null </dev/null); rc_a=$?
  out_b=$(timeout 60 "${b[@]}" 2>/dev/null </dev/null); rc_b=$?
  if [ $rc_a = 0 ] && [ $rc_b = 0 ] && [ -n "$out_a" ] && [ "$out_a" = "$out_b" ]; then
    ok "$name"
  else
    fail "$name (exit $rc_a and $rc_b; outputs differ or are empty)" "$(printf '%s\n--- vs ---\n%s' "${out_a:0:300}" "${out_b:0:300}")"
  fi
}

tools=(generate logits tokenize plan perplexity)
benches=()
for b in "$bin"/edgellm-bench "$bin"/edgellm-bench-*; do
  [ -x "$b" ] && benches+=("$(basename "$b")")
done

for t in "${tools[@]}"; do
  exe="$bin/edgellm-$t"
  if [ ! -x "$exe" ]; then
    fail "edgellm-$t is not built in $bin"
    continue
  fi
  expect "$t --version" 0 "^edgellm-$t \(edgellm $version, git ([0-9a-f]{7,}|unknown)\)" -- "$exe" --version
  expect "$t --version: the microkernel" 0 "^microkernel: [a-z0-9_]+ " -- "$exe" --version
  expect "$t --help" 0 "usage: edgellm-$t" -- "$exe" --help
  expect "$t -h" 0 "usage: edgellm-$t" -- "$exe" -h
  expect "$t unknown flag" 2 "unknown argument '--frobnicate'" -- "$exe" --frobnicate
  expect "$t missing value" 2 "^edgellm-$t: -m needs a value (DIR|PATH)" -- "$exe" -m
  if [ "$t" = tokenize ]; then
    expect "$t bad number" 2 "--decode" -- "$exe" -m "$model" --decode 1,x
  else
    expect "$t bad number" 2 "-t: 'many' is not an integer in \[1, [0-9]+\]" -- "$exe" -m "$model" -t many
  fi
done
for b in ${benches[@]+"${benches[@]}"}; do
  exe="$bin/$b"
  expect "$b --version" 0 "^$b \(edgellm $version, git ([0-9a-f]{7,}|unknown)\)" -- "$exe" --version
  expect "$b --help" 0 "usage: " -- "$exe" --help
  expect "$b unknown flag" 2 "unknown argument '--frobnicate'" -- "$exe" --frobnicate
  expect "$b missing value" 2 "--threads" -- "$exe" --threads
  expect "$b bad number" 2 "-t: item 'many'" -- "$exe" -t many
  expect "$b bad -o format" 2 "-o: 'xml' is not one of 'tsv', 'json', 'jsonl', 'md', 'csv'" -- "$exe" -o xml
  expect "$b --format is -o" 2 "--format: 'xml'" -- "$exe" --format=xml
done

# The short spellings mean the long ones.
gen="$bin/edgellm-generate"
same "generate -m -p -n -s -t -c --temp" \
  -- "$gen" -m "$model" -p "And God said" -n 6 -s 3 -t 1 -c 64 --temp 0.7 \
  -- "$gen" --model "$model" --prompt "And God said" --max-tokens 6 --seed 3 --threads 1 \
     --context 64 --temperature 0.7
printf 'And God said' >"$tmp/prompt.txt"
same "generate -f FILE is --prompt" \
  -- "$gen" -m "$model" -f "$tmp/prompt.txt" -n 6 -s 3 -t 1 \
  -- "$gen" -m "$model" -p "And God said" -n 6 -s 3 -t 1
out=$(printf 'And God said' | timeout 60 "$gen" -m "$model" -f - -n 6 -s 3 -t 1 2>/dev/null)
want=$(timeout 60 "$gen" -m "$model" -p "And God said" -n 6 -s 3 -t 1 2>/dev/null </dev/null)
if [ -n "$out" ] && [ "$out" = "$want" ]; then ok "generate -f - reads stdin"; else fail "generate -f - reads stdin" "$out"; fi
expect "generate -f of a missing file" 1 "--file: .*'$tmp/nope.txt'" -- "$gen" -m "$model" -f "$tmp/nope.txt"
expect "generate -f of a directory" 1 "--file: .*'$tmp'" -- "$gen" -m "$model" -f "$tmp"
expect "generate -n 0" 2 "-n: '0' is not an integer in \[1, [0-9]+\] \(or -1\)" -- "$gen" -m "$model" -n 0
# generation_config.json's defaults: do_sample false is greedy, a flag wins, a bad value names
# the file and the key.
cp -r "$model" "$tmp/gc"
printf '{"do_sample": false, "top_k": 7, "eos_token_id": [4093]}' >"$tmp/gc/generation_config.json"
same "generate: generation_config do_sample false = --greedy" \
  -- "$gen" -m "$tmp/gc" -p "And God said" -n 8 -s 5 -t 1 \
  -- "$gen" -m "$model" -p "And God said" -n 8 -s 5 -t 1 --greedy
expect "generate: generation_config applied, printed" 0 \
  "generation defaults from .*generation_config.json: do_sample false \(greedy\), top_k 7, eos 4093" \
  -- "$gen" -m "$tmp/gc" -p "And God said" -n 2 -t 1
expect "generate: a flag wins over generation_config" 0 "flags chose do_sample false \(greedy\) \(by --temperature\)" \
  -- "$gen" -m "$tmp/gc" -p "And God said" -n 2 -t 1 --temp 0.9
printf '{"top_p": "high"}' >"$tmp/gc/generation_config.json"
expect "generate: a bad generation_config names the file and key" 1 \
  "gc/generation_config.json: key 'top_p': expected a number" -- "$gen" -m "$tmp/gc" -p "And God said" -n 2
same "tokenize -m -p" \
  -- "$bin/edgellm-tokenize" -m "$model" -p "In the beginning" \
  -- "$bin/edgellm-tokenize" --tokenizer "$model" --text "In the beginning"
same "tokenize -f FILE is --text" \
  -- "$bin/edgellm-tokenize" -m "$model" -f "$tmp/prompt.txt" \
  -- "$bin/edgellm-tokenize" -m "$model" -p "And God said"
same "logits -m -t" \
  -- "$bin/edgellm-logits" -m "$model" --ids 1,2 --out - -t 1 \
  -- "$bin/edgellm-logits" --model "$model" --ids 1,2 --out - --threads 1
same "plan -m -c -t" \
  -- "$bin/edgellm-plan" -m "$model" -c 64 -t 2 \
  -- "$bin/edgellm-plan" --model "$model" --context 64 --threads 2

finish
