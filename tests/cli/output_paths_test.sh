#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every output path follows one rule (io/output_path.hpp): edgellm-quantize --out, edgellm-logits
# --out and edgellm-generate --packed-cache never replace the current directory, an input or a
# directory holding one, a device, a FIFO or a directory that is not an earlier output; nothing
# that appears at the output during a run is replaced; and no killed or interrupted run leaves a
# temporary that the next run does not remove. Each case checks sentinel files byte for byte.
#   output_paths_test.sh QUANTIZE_BIN LOGITS_BIN GENERATE_BIN SOURCE_DIR
set -uo pipefail
quantize=$(realpath "$1")
logits=$(realpath "$2")
generate=$(realpath "$3")
src=$(realpath "$4")
fp16="$src/models/kjv-target-fp16"
awq="$src/models/kjv-target-awq"
calib="$src/tests/data/calib/genesis-1-11.txt"
tmp=$(mktemp -d)
cleanup() {
  mountpoint -q "$tmp/mnt" 2>/dev/null && umount "$tmp/mnt"
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

common=(--calib "$calib" --samples 1 --seqlen 64 --method rtn --quiet)
q=(-m "$fp16" "${common[@]}")
qin=(-m "$tmp/a/in" "${common[@]}")
# The sha256 of every file under $1 (names and contents), and whether a node is what it was.
tree_sum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum) | sha256sum; }
# refused NAME PATTERN -- CMD...: exit 1, PATTERN in the output, and no --force suggested.
refused() {
  local name=$1 pattern=$2
  shift 3
  expect "$name" 1 "$pattern" -- "$@"
  local out
  out=$(timeout "${EXPECT_TIMEOUT:-60}" "$@" 2>&1 </dev/null)
  if grep -q -- "--force" <<<"$out"; then
    fail "$name: suggests --force" "$out"
  else
    ok "$name: no --force hint"
  fi
}
# wait_for GLOB: until a path matches (at most 20 s); 0 when one did.
wait_for() {
  local i
  for i in $(seq 2000); do
    compgen -G "$1" >/dev/null && return 0
    sleep 0.01
  done
  return 1
}

# --out . in a directory of the user's files, --out an input or a directory holding it.
mkdir -p "$tmp/cwd" "$tmp/a"
printf 'my notes\n' > "$tmp/cwd/notes.txt"
cp -r "$fp16" "$tmp/a/in"
printf 'beside the model\n' > "$tmp/a/notes.txt"
before_cwd=$(tree_sum "$tmp/cwd")
before_a=$(tree_sum "$tmp/a")
for force in "" --force; do
  refused "quantize --out . $force" "is the current directory" -- \
    bash -c 'cd "$1" && shift && exec "$@"' _ "$tmp/cwd" "$quantize" "${q[@]}" --out . $force
  refused "quantize --out an ancestor of -m $force" "contains the input" -- \
    "$quantize" "${qin[@]}" --out "$tmp/a" $force
  refused "quantize --out -m itself $force" "is the input" -- \
    "$quantize" "${qin[@]}" --out "$tmp/a/in/" $force
  refused "quantize --out a directory that is not an earlier output $force" \
    "without the .edgellm-quantize file" -- "$quantize" "${q[@]}" --out "$tmp/cwd" $force
done
[ "$(tree_sum "$tmp/cwd")" = "$before_cwd" ] && ok "the current directory's files intact" ||
  fail "the current directory's files changed" "$(ls -la "$tmp/cwd")"
[ "$(tree_sum "$tmp/a")" = "$before_a" ] && ok "the input and its directory intact" ||
  fail "the input or its directory changed" "$(ls -laR "$tmp/a" | head)"

# FIFOs and device nodes, for every tool.
mkfifo "$tmp/fifo"
nodes=("$tmp/fifo")
if mknod "$tmp/null" c 1 3 2>/dev/null; then
  nodes+=("$tmp/null")
else
  ok "char device cases skipped: mknod is not permitted here"
fi
for node in "${nodes[@]}"; do
  kind=$([ -p "$node" ] && echo FIFO || echo "character device")
  for force in "" --force; do
    refused "quantize --out $kind $force" "is a $kind" -- "$quantize" "${q[@]}" --out "$node" $force
    EXPECT_TIMEOUT=20 expect "generate --packed-cache $kind $force" 0 \
      "is a $kind.*not a regular file; not written" -- "$generate" -m "$awq" -n 1 \
      --packed-cache "$node" $force
  done
  refused "logits --out $kind" "is a $kind" -- "$logits" -m "$awq" --ids 1,2 --out "$node" --quiet
  if { [ -p "$node" ] && [ "$kind" = FIFO ]; } || { [ -c "$node" ] && [ "$kind" != FIFO ]; }; then
    ok "the $kind is still one"
  else
    fail "the $kind was replaced" "$(ls -la "$node")"
  fi
done
[ -z "$(ls "$tmp" | grep '\.tmp\.')" ] && ok "no temporary left by refusals" ||
  fail "temporary left by refusals" "$(ls "$tmp")"

# An earlier output (it carries the marker) is replaced with --force only.
expect "quantize" 0 '^$' -- "$quantize" "${q[@]}" --out "$tmp/out"
[ -f "$tmp/out/.edgellm-quantize" ] && ok "the output carries the marker" || fail "no marker"
expect "quantize onto its earlier output" 1 "exists; not overwritten \(--force" -- \
  "$quantize" "${q[@]}" --out "$tmp/out"
expect "quantize onto its earlier output --force" 0 '^$' -- "$quantize" "${q[@]}" \
  --out "$tmp/out" --force

# A file that appears at --out during the run stays; the finished output is kept aside.
"$quantize" "${q[@]}" --out "$tmp/race" 2>"$tmp/race.err" &
pid=$!
if wait_for "$tmp/race.tmp.*"; then
  printf 'sentinel\n' > "$tmp/race"
  wait $pid
  rc=$?
  [ $rc = 1 ] && ok "quantize: a target that appeared: exit 1" ||
    fail "appeared: exit $rc" "$(cat "$tmp/race.err")"
  [ "$(cat "$tmp/race")" = sentinel ] && ok "the file that appeared is intact" ||
    fail "it was replaced"
  kept="$tmp/race.kept.$pid"
  grep -q "kept at '$kept'" "$tmp/race.err" && [ -f "$kept/model.safetensors" ] &&
    ok "the message names the kept output" || fail "kept output" "$(cat "$tmp/race.err"; ls "$tmp")"
else
  wait $pid
  fail "quantize finished before its temporary directory was seen"
fi

# Two runs on one --out at once: one writes it, the other exits 1 (never both 0).
"$quantize" "${q[@]}" --out "$tmp/twice" 2>/dev/null &
p1=$!
"$quantize" "${q[@]}" --out "$tmp/twice" 2>/dev/null &
p2=$!
wait $p1
r1=$?
wait $p2
r2=$?
[ "$((r1 + r2))" = 1 ] && ok "two runs at once: exits $r1 and $r2" ||
  fail "two runs at once: exits $r1 and $r2"

# SIGTERM removes the temporary directory; SIGKILL's is removed by the next run.
for sig in TERM KILL; do
  rm -rf "$tmp/sig"
  "$quantize" "${q[@]}" --out "$tmp/sig" 2>/dev/null &
  pid=$!
  # Once the marker is in it: a directory killed before that is not provably ours (left alone).
  if wait_for "$tmp/sig.tmp.$pid.*/.edgellm-quantize"; then
    kill -$sig $pid
    wait $pid 2>/dev/null
    if [ $sig = TERM ]; then
      [ -z "$(compgen -G "$tmp/sig.tmp.*")" ] && ok "SIGTERM: no temporary left" ||
        fail "SIGTERM left" "$(ls "$tmp")"
    fi
    expect "quantize after SIG$sig" 0 '^$' -- "$quantize" "${q[@]}" --out "$tmp/sig"
    [ -z "$(compgen -G "$tmp/sig.tmp.*")" ] && ok "SIG$sig: no temporary left after the rerun" ||
      fail "SIG$sig: temporary left after the rerun" "$(ls "$tmp")"
  else
    wait $pid
    fail "SIG$sig: quantize finished before its temporary directory was seen"
  fi
done

# A packed cache write killed part way: the next write removes its temporary.
caught=0
for i in $(seq 10); do
  rm -f "$tmp/pc.bin"*
  "$generate" -m "$awq" -n 1 --packed-cache "$tmp/pc.bin" >/dev/null 2>&1 &
  pid=$!
  for j in $(seq 20000); do
    compgen -G "$tmp/pc.bin.tmp.*" >/dev/null && break
    kill -0 $pid 2>/dev/null || break
  done
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  if compgen -G "$tmp/pc.bin.tmp.*" >/dev/null; then
    caught=1
    break
  fi
done
if [ $caught = 0 ]; then
  # Too quick to catch here: a dead writer's temporary made by hand is the same case.
  sh -c 'exit 0' &
  dead=$!
  wait $dead
  printf 'EDGELLM Q4 PACK partial' > "$tmp/pc.bin.tmp.$dead.1.0"
  ok "packed cache write too quick to kill; a dead pid's temporary stands in"
else
  ok "packed cache write killed with its temporary on disk"
fi
expect "generate after a killed packed cache write" 0 "wrote $tmp/pc.bin" -- "$generate" -m "$awq" \
  -n 1 --packed-cache "$tmp/pc.bin"
[ -z "$(compgen -G "$tmp/pc.bin.tmp.*")" ] && ok "no packed cache temporary left" ||
  fail "packed cache temporary left" "$(ls "$tmp")"

# edgellm-logits --out when the disk fills: the earlier file stays whole. First a file size
# limit (SIGXFSZ ignored: write() fails with EFBIG), then a full tmpfs where mounting is allowed.
"$logits" -m "$awq" --ids 1,2 --out "$tmp/logits.json" --quiet
cp "$tmp/logits.json" "$tmp/logits.orig"
full_disk=(bash -c 'ulimit -f 8; trap "" XFSZ; exec "$@"' full_disk)
expect "logits --out past the file size limit" 1 "logits.json.*write failed" -- "${full_disk[@]}" \
  "$logits" -m "$awq" --ids 1,2,3,4,5,6 --all-positions --out "$tmp/logits.json" --quiet
cmp -s "$tmp/logits.json" "$tmp/logits.orig" && ok "the earlier logits file is intact" ||
  fail "the earlier logits file changed"
mkdir -p "$tmp/mnt"
if mount -t tmpfs -o size=64k tmpfs "$tmp/mnt" 2>/dev/null; then
  cp "$tmp/logits.orig" "$tmp/mnt/logits.json" || fail "the earlier file does not fit 64 KiB"
  dd if=/dev/zero of="$tmp/mnt/fill" bs=4k 2>/dev/null
  expect "logits --out on a full disk" 1 "No space left on device" -- "$logits" -m "$awq" \
    --ids 1,2,3,4 --all-positions --out "$tmp/mnt/logits.json" --quiet
  cmp -s "$tmp/mnt/logits.json" "$tmp/logits.orig" &&
    ok "the earlier logits file on the full disk is intact" ||
    fail "the earlier logits file on the full disk changed"
  [ -z "$(compgen -G "$tmp/mnt/logits.json.tmp.*")" ] && ok "no logits temporary left" ||
    fail "logits temporary left" "$(ls "$tmp/mnt")"
  umount "$tmp/mnt"
else
  ok "full tmpfs case skipped: mount is not permitted here"
fi
finish
