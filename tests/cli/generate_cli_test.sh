#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# edgellm-generate end to end: the default run on the bundled model, reproducibility, and bad
# input (each a clear message and a non-zero exit, never a crash).
#   generate_cli_test.sh BIN SOURCE_DIR
set -uo pipefail
bin=$1
src=$2
model="$src/models/kjv-draft-awq"  # the smallest bundled model keeps this fast
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


expect "help" 0 "--kv-type" -- "$bin" --help
expect "default bundled model" 0 "tok/s" -- "$bin" -n 24 --seed 3
expect "fp16 checkpoint, greedy" 0 "generated" -- "$bin" --model "$src/models/kjv-target-fp16" --greedy -n 8
expect "help lists --lm-head" 0 "--lm-head F .*f16" -- "$bin" --help
expect "--lm-head int4, greedy" 0 "generated" -- "$bin" --model "$model" --greedy -n 4 --lm-head int4
expect "--lm-head int3" 2 "--lm-head: 'int3' is not f16, int8 or int4" -- "$bin" --model "$model" --lm-head int3
expect "missing model dir" 1 "not a directory" -- "$bin" --model "$tmp/nope"
expect "-n 0" nz "-n: '0' is not an integer in \[1, [0-9]+\] \(or -1\)" -- "$bin" --model "$model" -n 0
expect "empty prompt" 1 "empty" -- "$bin" --model "$model" --prompt ""
expect "invalid UTF-8 prompt" 1 "UTF-8" -- "$bin" --model "$model" --prompt $'bad \xff byte'
expect "token id out of range" 1 "outside|out of range|vocab" -- "$bin" --model "$model" --prompt-ids 1,2,999999
expect "bad number" 2 "not a number" -- "$bin" --model "$model" --temperature hot
expect "unknown flag" 2 "unknown argument" -- "$bin" --model "$model" --frobnicate

# Broken tokenizer.json files next to a good checkpoint.
broken() {
  local name=$1 edit=$2
  mkdir -p "$tmp/$name"
  cp "$model"/config.json "$model"/generation_config.json "$model"/model.safetensors "$tmp/$name/"
  /usr/bin/python3 - "$model/tokenizer.json" "$tmp/$name/tokenizer.json" "$edit" <<'PY'
import json, sys
src, dst, edit = sys.argv[1:]
text = open(src, encoding="utf-8").read()
if edit == "truncated":
    open(dst, "w", encoding="utf-8").write(text[: len(text) // 2])
    sys.exit()
d = json.loads(text)
if edit == "unknown-model":
    d["model"]["type"] = "WordPiece"
elif edit == "no-merges":
    del d["model"]["merges"]
json.dump(d, open(dst, "w", encoding="utf-8"), ensure_ascii=False)
PY
}
broken truncated truncated
broken unknown unknown-model
broken nomerges no-merges
expect "truncated tokenizer.json" 1 "tokenizer.json" -- "$bin" --model "$tmp/truncated"
expect "unknown tokenizer model type" 1 "WordPiece" -- "$bin" --model "$tmp/unknown"
expect "tokenizer.json without merges" 1 "merges" -- "$bin" --model "$tmp/nomerges"
mkdir -p "$tmp/notok" && cp "$model"/config.json "$model"/model.safetensors "$tmp/notok/"
expect "no tokenizer.json" 1 "tokenizer.json" -- "$bin" --model "$tmp/notok"

# Same seed, same text; --print-ids prints JSON.
a=$("$bin" --model "$model" -n 16 --seed 42 --print-ids 2>/dev/null)
b=$("$bin" --model "$model" -n 16 --seed 42 --print-ids 2>/dev/null)
c=$("$bin" --model "$model" -n 16 --seed 43 --print-ids 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] && [[ "$a" =~ ^\[[0-9]+(,\ [0-9]+)*\]$ ]]; then
  echo "ok   seeded sampling is reproducible"
else
  echo "FAIL seeded sampling: '$a' / '$b' / '$c'"
  failures=$((failures + 1))
fi
# Chat on stdin: two turns, then end of input.
if printf 'Who is the LORD?\nAnd then?\n' | "$bin" --model "$model" --chat -n 8 --system "Speak as the KJV." >"$tmp/chat.out" 2>"$tmp/chat.err" \
   && [ "$(grep -c 'generated' "$tmp/chat.err")" = 2 ]; then
  echo "ok   chat"
else
  echo "FAIL chat"; cat "$tmp/chat.err"
  failures=$((failures + 1))
fi

# Interactive chat: the second turn prefills only what the cache does not hold (stats line
# "N prompt tokens (C cached, P prefilled)"); empty lines are skipped; /reset forgets the
# conversation (the next turn caches nothing); /exit ends it (later lines unread); exit 0.
printf 'Who is the LORD?\n\n   \nAnd then?\n/reset\nWho is the LORD?\n/exit\nnever read\n' |
  "$bin" --model "$model" -i -n 8 --greedy --system "Speak as the KJV." >"$tmp/ichat.out" 2>"$tmp/ichat.err"
rc=$?
mapfile -t turns < <(sed -nE 's/^\[([0-9]+) prompt tokens \(([0-9]+) cached, ([0-9]+) prefilled\).*/\1 \2 \3/p' "$tmp/ichat.err")
if [ $rc = 0 ] && [ ${#turns[@]} = 3 ]; then
  read -r p1 c1 f1 <<<"${turns[0]}"; read -r p2 c2 f2 <<<"${turns[1]}"; read -r p3 c3 f3 <<<"${turns[2]}"
  if [ "$c1" = 0 ] && [ "$f1" = "$p1" ] && [ "$c2" -gt 0 ] && [ "$f2" -lt "$p2" ] && [ $((c2 + f2)) = "$p2" ] \
     && [ "$c3" = 0 ] && [ "$p3" = "$p1" ] && grep -q "conversation reset" "$tmp/ichat.err"; then
    ok "interactive chat: turn 2 reuses $c2 of $p2 prompt tokens, /reset clears, /exit ends"
  else
    fail "interactive chat stats: ${turns[*]}" "$(cat "$tmp/ichat.err")"
  fi
else
  fail "interactive chat (exit $rc, ${#turns[@]} stats lines, wanted 3)" "$(cat "$tmp/ichat.err")"
fi
expect "chat: end of input at once exits 0" 0 "loaded" -- "$bin" --model "$model" --chat -n 4
# A line that is not UTF-8 is reported and skipped; the chat goes on with the next line.
printf 'bad \xff byte\nAnd then?\n' | "$bin" --model "$model" -i -n 4 >"$tmp/u8.out" 2>"$tmp/u8.err"
rc=$?
if [ $rc = 0 ] && grep -q "input line 1: not valid UTF-8 (byte 5); skipped" "$tmp/u8.err" \
   && [ "$(grep -c ' generated; stop' "$tmp/u8.err")" = 1 ] && grep -q "chat ended: 1 answer;" "$tmp/u8.err"; then
  ok "chat: an invalid UTF-8 line is skipped, the next answered"
else
  fail "chat: invalid UTF-8 line (exit $rc)" "$(cat "$tmp/u8.err")"
fi
# A context of 128 with answers of 50 tokens fills during the second answer: the first turn is
# dropped (a note on stderr), the answer goes on, and so does the chat.
printf 'And it came to pass\n%.0s' 1 2 3 4 |
  "$bin" --model "$src/models/kjv-target-awq" -i -n 50 -c 128 --seed 1 >"$tmp/shift.out" 2>"$tmp/shift.err"
rc=$?
if [ $rc = 0 ] && grep -q "^context full: dropped the oldest 1 turn$" "$tmp/shift.err" \
   && [ "$(grep -c ' generated; stop' "$tmp/shift.err")" = 4 ] && grep -q "chat ended: 4 answers" "$tmp/shift.err"; then
  ok "chat: a full context drops the oldest turn and goes on"
else
  fail "chat: full context (exit $rc)" "$(cat "$tmp/shift.err")"
fi
# A message too long for the context on its own is reported and skipped; the chat goes on.
long_line=$(printf 'and the LORD spake unto Moses %.0s' $(seq 12))
printf '%s\nAnd then?\n' "$long_line" | "$bin" --model "$model" -i -n 4 -c 48 >"$tmp/long.out" 2>"$tmp/long.err"
rc=$?
if [ $rc = 0 ] && grep -q "input line 1: [0-9]* tokens (in the chat template.*) do not fit the context of 48 (raise --context); skipped" "$tmp/long.err" \
   && grep -q "chat ended: 1 answer;" "$tmp/long.err"; then
  ok "chat: a message longer than the context is skipped, the next answered"
else
  fail "chat: a message longer than the context (exit $rc)" "$(cat "$tmp/long.err")"
fi
# -n -1: until the end of the text or a full context; -s -1: a random seed, printed;
# --no-display-prompt: the prompt is not echoed.
expect "-n -1 runs until the context is full" 0 "stop: context full" -- \
  "$bin" --model "$model" -n -1 -c 48 --ignore-eos
expect "--max-tokens -1" 0 "stop: context full" -- "$bin" --model "$model" --max-tokens -1 -c 48 --ignore-eos
expect "-n -2" 2 "-n: '-2' is not an integer in \[1, [0-9]+\] \(or -1\)" -- "$bin" --model "$model" -n -2
expect "-s -1 prints the seed" 0 "^seed: [0-9]+$" -- "$bin" --model "$model" -n 2 -s -1
seed_line=$("$bin" --model "$model" -n 2 -s -1 --quiet 2>&1 >/dev/null)
if [ -z "$seed_line" ]; then ok "-s -1 --quiet: no seed line"; else fail "-s -1 --quiet" "$seed_line"; fi
text=$("$bin" --model "$model" -n 4 --prompt "And God said" --no-display-prompt --quiet)
if [ $? = 0 ] && [ -n "$text" ] && [[ "$text" != "And God said"* ]]; then
  ok "--no-display-prompt: the generated text only"
else
  fail "--no-display-prompt" "$text"
fi
text=$("$bin" --model "$model" -n 4 --prompt "And God said" --quiet)
if [[ "$text" == "And God said"* ]]; then ok "the prompt is echoed by default"; else fail "prompt echo" "$text"; fi

# Progress of the load: only for a stage that runs over a second, so a load of a fraction of a
# second (the bundled target model) draws none; --quiet: none, and no other chatter (stderr
# empty).
"$bin" --model "$src/models/kjv-target-awq" -n 2 >/dev/null 2>"$tmp/progress.err" </dev/null
rc=$?
lines=$(grep -cE '^[a-z0-9 ]+: +[0-9]+%$' "$tmp/progress.err")
if [ $rc = 0 ] && [ "$lines" = 0 ] && grep -q "^loaded" "$tmp/progress.err"; then
  ok "progress: a quick load draws no progress lines"
else
  fail "progress: $lines lines for a quick load" "$(cat "$tmp/progress.err")"
fi
"$bin" --model "$model" -n 2 --quiet >"$tmp/quiet.out" 2>"$tmp/quiet.err" </dev/null
if [ $? = 0 ] && [ ! -s "$tmp/quiet.err" ] && [ -s "$tmp/quiet.out" ]; then
  ok "--quiet: the text only, nothing on stderr"
else
  fail "--quiet" "$(cat "$tmp/quiet.err")"
fi

# Prompt cache: the second run starts from the saved prefix and prints the same ids; files from
# another model or corrupted ones are refused.
sys="In the beginning God created the heaven and the earth. And the earth was without form, and void."
plain=$("$bin" --model "$model" --prompt "$sys And God said" -n 12 --greedy --print-ids 2>/dev/null)
"$bin" --model "$model" --prompt "$sys And Moses said" -n 4 --greedy --prompt-cache "$tmp/pc.bin" >/dev/null 2>&1
warm=$("$bin" --model "$model" --prompt "$sys And God said" -n 12 --greedy --print-ids --prompt-cache "$tmp/pc.bin" 2>"$tmp/pc.err")
if [ -n "$plain" ] && [ "$plain" = "$warm" ] && grep -q "prompt cache: [0-9]* tokens from" "$tmp/pc.err"; then
  echo "ok   prompt cache reuse gives the same tokens"
else
  echo "FAIL prompt cache: '$plain' vs '$warm'"; cat "$tmp/pc.err"
  failures=$((failures + 1))
fi
for kv in f32 f16 int8 int4; do
  expect "--kv-type $kv" 0 "generated" -- "$bin" --model "$model" --kv-type $kv -n 4
done
expect "bad --kv-type" 2 "int8" -- "$bin" --model "$model" --kv-type q3
# A prompt cache of ours that does not fit (another model, damaged) is rebuilt with a warning,
# as the packed cache is (exit 0); the next run then starts from it.
cp "$tmp/pc.bin" "$tmp/pc_other.bin"
expect "prompt cache of another model: rebuilt" 0 "warning: --prompt-cache: .*another model.*; rebuilding it" -- "$bin" --model "$src/models/kjv-target-awq" --prompt "x" -n 2 --prompt-cache "$tmp/pc_other.bin"
expect "... then it is this model's" 0 "prompt cache: [0-9]+ tokens from" -- "$bin" --model "$src/models/kjv-target-awq" --prompt "x" -n 2 --prompt-cache "$tmp/pc_other.bin"
head -c 200 "$tmp/pc.bin" > "$tmp/pc_short.bin"
expect "truncated prompt cache: rebuilt" 0 "warning: --prompt-cache: .*pc_short.bin.*; rebuilding it" -- "$bin" --model "$model" --prompt "x" -n 2 --prompt-cache "$tmp/pc_short.bin"
cp "$tmp/pc.bin" "$tmp/pc_flip.bin"
printf '\x55' | dd of="$tmp/pc_flip.bin" bs=1 seek=3000 conv=notrunc 2>/dev/null
expect "corrupted prompt cache: rebuilt" 0 "warning: --prompt-cache: .*(checksum|corrupt).*; rebuilding it" -- "$bin" --model "$model" --prompt "x" -n 2 --prompt-cache "$tmp/pc_flip.bin"

# Speculative decoding: greedy output identical to plain decoding with either draft (plain
# decoding with the same KV cache type: int8 and f16 caches may part at a near tie).
target="$src/models/kjv-target-awq"
for d in "--draft $model" "--draft lookup" "--draft $model --adaptive" "--draft $model -k 2 --kv-type f16"; do
  kv=int8
  [[ "$d" == *"--kv-type f16"* ]] && kv=f16
  ref=$("$bin" --model "$target" --prompt "And God said" -n 40 --greedy --print-ids --kv-type "$kv" 2>/dev/null)
  # shellcheck disable=SC2086
  got=$("$bin" --model "$target" --prompt "And God said" -n 40 --greedy --print-ids $d 2>"$tmp/spec.err")
  if [ -n "$ref" ] && [ "$ref" = "$got" ] && grep -q "speculative" "$tmp/spec.err"; then
    echo "ok   greedy with $d equals plain decoding"
  else
    echo "FAIL greedy with $d: '$got' vs '$ref'"; cat "$tmp/spec.err"
    failures=$((failures + 1))
  fi
done
expect "draft with another vocabulary" 1 "vocab" -- "$bin" --model "$target" --draft "$src/tests/data/model/llama-fp16" -n 4
expect "-k 0" 2 "-k: '0' is not an integer in \[1, 32\]" -- "$bin" --model "$target" --draft lookup -k 0

# Bad inputs (docs/bad_inputs.md): each refused at once with a message naming the path or flag.
mkfifo "$tmp/fifo"
for f in /dev/zero /dev/full "$tmp/fifo" "$tmp"; do
  [ -e "$f" ] || continue
  expect "--prompt-cache $f" 1 "not a regular file" -- "$bin" --model "$model" --prompt x -n 2 --prompt-cache "$f"
done
for t in nan inf -1 -inf; do
  expect "--temperature $t" 2 "not a number" -- "$bin" --model "$model" --temperature "$t"
done
expect "--top-p nan" 2 "not a number" -- "$bin" --model "$model" --top-p nan
expect "--threads 100000" 2 "--threads: '100000' is not an integer in \[1, [0-9]+\] \(at most 4 x the" -- "$bin" --model "$model" --threads 100000
expect "--threads 0" 2 "--threads: '0' is not an integer in \[1, " -- "$bin" --model "$model" --threads 0
hw=$(nproc)
expect "--threads beyond the hardware warns" 0 "edgellm-generate: warning: $((hw + 1)) threads is more than" -- "$bin" --model "$model" -n 2 --threads $((hw + 1))
expect "--context above max_position_embeddings" 2 "above the model's max_position_embeddings 2048" -- "$bin" --model "$model" --context 4096
expect "--context above it with --force-context" 0 "generated" -- "$bin" --model "$model" --context 4096 --force-context -n 2
expect "--force without --packed-cache FILE" 2 "--force: only with --packed-cache FILE" -- "$bin" --model "$model" --force

# A prompt longer than the context: refused before anything reaches stdout.
long=$(printf 'And God said, Let there be light. %.0s' $(seq 1 20))
"$bin" --model "$model" --context 16 --prompt "$long" -n 2 >"$tmp/long.out" 2>"$tmp/long.err" </dev/null
rc=$?
if [ $rc = 1 ] && [ ! -s "$tmp/long.out" ] && grep -q "do not fit the context of 16" "$tmp/long.err"; then
  echo "ok   prompt longer than the context: exit 1, nothing on stdout"
else
  echo "FAIL prompt longer than the context (exit $rc):"; cat "$tmp/long.out" "$tmp/long.err"
  failures=$((failures + 1))
fi

# Lost output: stdout closed or on a full disk is an error (exit 1, message on stderr).
check_lost() {
  local name=$1 rc=$2 err=$3
  if [ "$rc" = 1 ] && grep -Eq "stdout" "$err"; then
    echo "ok   $name: exit 1"
  else
    echo "FAIL $name (exit $rc):"; cat "$err"
    failures=$((failures + 1))
  fi
}
"$bin" --model "$model" -n 4 2>"$tmp/closed.err" >&- </dev/null
check_lost "stdout closed" $? "$tmp/closed.err"
if [ -e /dev/full ]; then
  "$bin" --model "$model" -n 4 2>"$tmp/full.err" >/dev/full </dev/null
  check_lost "stdout on a full disk" $? "$tmp/full.err"
  "$bin" --model "$model" -n 4 --print-ids 2>"$tmp/full_ids.err" >/dev/full </dev/null
  check_lost "--print-ids on a full disk" $? "$tmp/full_ids.err"
  "$bin" --help 2>"$tmp/full_help.err" >/dev/full
  check_lost "--help on a full disk" $? "$tmp/full_help.err"
fi

# A config.json with fewer layers than the checkpoint: an error naming the unused tensors.
mkdir -p "$tmp/fewer" && cp "$model"/* "$tmp/fewer/"
sed -E -i 's/"num_hidden_layers": ?4/"num_hidden_layers": 3/' "$tmp/fewer/config.json"
expect "config with fewer layers than the checkpoint" 1 "not used by its config.json.*model\.layers\.3\." -- "$bin" --model "$tmp/fewer" -n 2
expect "... loaded with --allow-extra-tensors" 0 "generated" -- "$bin" --model "$tmp/fewer" -n 2 --allow-extra-tensors

# An explicit --packed-cache FILE that is not ours is left alone unless --force.
printf 'my notes' > "$tmp/notes.bin"
expect "--packed-cache on another file" 0 "not overwritten.*--force" -- "$bin" --model "$model" -n 2 --packed-cache "$tmp/notes.bin"
if [ "$(cat "$tmp/notes.bin")" = "my notes" ]; then echo "ok   ... the file is unchanged"; else echo "FAIL ... the file was changed"; failures=$((failures + 1)); fi
expect "--packed-cache on another file with --force" 0 "wrote" -- "$bin" --model "$model" -n 2 --packed-cache "$tmp/notes.bin" --force
expect "... then it is ours" 0 "mapped from" -- "$bin" --model "$model" -n 2 --packed-cache "$tmp/notes.bin"

# Caches that cannot be saved are warnings, under --quiet too (it hides progress and statistics,
# not warnings): the text was produced, exit 0.
printf 'my notes' > "$tmp/notes2.bin"
expect "--quiet: a packed cache left alone still warns" 0 "warning: packed cache: .*not overwritten" -- "$bin" --model "$model" -n 2 --quiet --packed-cache "$tmp/notes2.bin"
expect "--quiet: a packed cache write failure warns" 0 "warning: packed cache: .*nodir" -- "$bin" --model "$model" -n 2 --quiet --packed-cache "$tmp/nodir/p.bin"
"$bin" --model "$model" -n 2 --prompt-cache "$tmp/nodir/pc.bin" >"$tmp/pcw.out" 2>"$tmp/pcw.err" </dev/null
rc=$?
if [ $rc = 0 ] && grep -q "And God said" "$tmp/pcw.out" && grep -q "warning: --prompt-cache: .*nodir.*; not saved" "$tmp/pcw.err"; then
  ok "a prompt cache write failure: the text, a warning, exit 0"
else
  fail "prompt cache write failure (exit $rc)" "$(cat "$tmp/pcw.err")"
fi

# Usage errors (exit 2) naming the flags: an empty -m is not the bundled model; flags that
# would silently ignore one another.
# The draft's embedding is small (4096 x 128): a generation of 2048 tokens would touch all of
# it, so an lm_head converted from it (which releases its pages) saves nothing and f16 is chosen.
expect "--memory-budget: the lm_head changes first" 0 "memory budget: to fit the budget of 3.5 MiB: lm_head int8 -> int4 \(peak [0-9.]+ MiB -> [0-9.]+ MiB\)$" -- "$bin" --model "$model" -p "And God said" -n 4 --memory-budget 3.5MiB
# No lm_head fits alone at int8 KV: the int8 one stays, the KV cache narrows, the context shrinks.
expect "--memory-budget: then the KV type, the context last" 0 "memory budget: to fit the budget of 3.0 MiB: KV int8 -> int4 [^;]*; context 2048 -> [0-9]+ tokens" -- "$bin" --model "$model" -p "And God said" -n 4 --memory-budget 3MiB
expect "--memory-budget: fits as asked" 0 "memory budget: fits as asked" -- "$bin" --model "$model" -p "And God said" -n 4 --memory-budget 1GiB
expect "--memory-budget: nothing fits" 1 "--memory-budget: .*nothing fits the budget of 1.0 MiB" -- "$bin" --model "$model" -p "And God said" -n 4 --memory-budget 1MiB
expect "--memory-budget: bad size" 2 "--memory-budget: " -- "$bin" --model "$model" --memory-budget lots
expect "-m ''" 2 "-m: empty DIR" -- "$bin" -m "" -n 2
expect "--prompt-ids with -p" 2 "--prompt and --prompt-ids both give the prompt" -- "$bin" --model "$model" -p "And God" --prompt-ids 1,2
expect "-p with -f" 2 "--prompt and --file both give the prompt" -- "$bin" --model "$model" -p "And God" -f -
expect "-p with -i" 2 "--prompt and --chat .* both give the prompt" -- "$bin" --model "$model" -p "And God" -i
expect "--system without -i" 2 "--system: only with --chat/-i" -- "$bin" --model "$model" --system "Be terse."

# -f reads a pipe (`-f <(cmd)`) or a FIFO to its end; devices are still refused.
expect "-f <(cmd)" 0 "^In the beginning" -- "$bin" --model "$model" -n 2 -f <(printf 'In the beginning')
mkfifo "$tmp/prompt.fifo"
timeout 60 bash -c "printf 'In the beginning' >'$tmp/prompt.fifo'" &
expect "-f FIFO" 0 "^In the beginning" -- "$bin" --model "$model" -n 2 -f "$tmp/prompt.fifo"
expect "-f /dev/zero" 1 "--file: .*/dev/zero': is a character device, not a regular file" -- "$bin" --model "$model" -n 2 -f /dev/zero

# Checked before the load (a 7B load takes a minute): with a truncated weights file, each of
# these still gets its own error, not the weights' (the first case shows the load's).
bw="$tmp/badweights"
mkdir -p "$bw" && cp "$model"/config.json "$model"/generation_config.json "$model"/tokenizer.json "$bw/"
head -c 2000 "$model/model.safetensors" >"$bw/model.safetensors"
expect "truncated weights: the load's error" 1 "model.safetensors" -- "$bin" --model "$bw" -n 2
expect "before the load: empty prompt" 1 "--prompt: empty" -- "$bin" --model "$bw" -n 2 --prompt ""
expect "before the load: invalid UTF-8 prompt" 1 "--prompt: .*not valid UTF-8" -- "$bin" --model "$bw" -n 2 --prompt $'bad \xff byte'
printf 'bad \xff byte' >"$tmp/bad_utf8.txt"
expect "before the load: invalid UTF-8 -f" 1 "--file: .*not valid UTF-8" -- "$bin" --model "$bw" -n 2 -f "$tmp/bad_utf8.txt"
expect "before the load: invalid UTF-8 --system" 1 "--system: .*not valid UTF-8" -- "$bin" --model "$bw" -n 2 -i --system $'\xff'
long=$(printf 'And God said, Let there be light. %.0s' $(seq 1 20))
expect "before the load: prompt longer than the context" 1 "--prompt: [0-9]+ tokens do not fit the context of 16" -- "$bin" --model "$bw" -n 2 --context 16 --prompt "$long"
expect "before the load: --prompt-ids beyond vocab_size" 1 "--prompt-ids: id 4096 \(item 3\) is out of range: the model's vocab_size is 4096" -- "$bin" --model "$bw" -n 2 --prompt-ids 1,2,4096
expect "before the load: --prompt-ids beyond the context" 1 "--prompt-ids: 20 tokens do not fit the context of 16" -- "$bin" --model "$bw" -n 2 --context 16 --prompt-ids "$(seq -s, 1 20)"
expect "before the load: --context above max_position_embeddings" 2 "--context: 4096 is above the model's max_position_embeddings 2048" -- "$bin" --model "$bw" -n 2 --context 4096
expect "before the load: --prompt-cache on a file not ours" 1 "--prompt-cache: .*exists and is not an edgellm prompt cache" -- "$bin" --model "$bw" -n 2 --prompt-cache "$tmp/notes2.bin"
if [ "$(cat "$tmp/notes2.bin")" = "my notes" ]; then ok "... the file is unchanged"; else fail "... the file was changed"; fi
cp "$bw/generation_config.json" "$tmp/gen.json"
for kv in temperature:1e308 temperature:-1 top_p:1.5 repetition_penalty:1e39; do
  printf '{"%s": %s}\n' "${kv%%:*}" "${kv#*:}" >"$bw/generation_config.json"
  expect "before the load: generation_config.json $kv" 1 "generation_config.json: key '${kv%%:*}': must be in" -- "$bin" --model "$bw" -n 2
done
cp "$tmp/gen.json" "$bw/generation_config.json"

# Output constraints: what the output may be, checked before the load; each exclusive.
expect "--json-schema: a refused keyword, before the load" 1 '--json-schema: \[json schema\] unsupported keyword "not" at #' -- "$bin" --model "$tmp/nope" --json-schema '{"type": "object", "not": {}}'
expect "--json-schema: a missing file" 1 "--json-schema: .*nope.json" -- "$bin" --model "$model" --json-schema "$tmp/nope.json"
expect "--grammar: a malformed grammar names line:column" 1 "--grammar: \[grammar\] 1:" -- "$bin" --model "$model" --grammar 'root ::= ("a"'
expect "--regex: lookahead is refused" 1 "--regex: .*lookahead" -- "$bin" --model "$model" --regex 'a(?=b)'
expect "two constraints" 2 "--regex and --json both constrain the output: choose one" -- "$bin" --model "$model" --regex a --json
expect "a constraint with --chat" 2 "--json: not with --chat" -- "$bin" --model "$model" --json --chat
expect "--print-grammar alone" 2 "--print-grammar: give the constraint" -- "$bin" --model "$model" --print-grammar
expect "--print-grammar prints the schema's GBNF" 0 "^root ::=" -- "$bin" --json-schema '{"type": "integer", "minimum": 1, "maximum": 12}' --print-grammar
choice=$("$bin" --model "$model" --choice light --choice darkness -n 8 --quiet --no-display-prompt 2>/dev/null)
if [ "$choice" = light ] || [ "$choice" = darkness ]; then ok "--choice: one of the choices"; else fail "--choice gave '$choice'"; fi
doc=$("$bin" --model "$model" --json-schema '{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"], "additionalProperties": false}' -n 24 --seed 2 --temp 1 --quiet --no-display-prompt 2>/dev/null)
if /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert set(d)=={"n"} and 0<=d["n"]<=99' "$doc"; then
  ok "--json-schema: a valid object within -n 24"
else
  fail "--json-schema gave '$doc'"
fi
printf '[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]' >"$tmp/tools.json"
expect "--tools on a checkpoint without a chat template" 1 "--tools: .*chat_template" -- "$bin" --model "$model" --tools "$tmp/tools.json"
printf '[{"type": "function", "function": {"parameters": {}}}]' >"$tmp/bad_tools.json"
expect "--tools: a function without a name" 1 "tools\[0\]\.function\.name: missing" -- "$bin" --model "$model" --tools "$tmp/bad_tools.json"
expect "--tool-choice without --tools" 2 "--tool-choice: only with --tools" -- "$bin" --model "$model" --tool-choice none

finish
