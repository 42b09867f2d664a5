#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# edgellm-perplexity on the bundled target and the held-out text, on a few short windows: the
# JSON fields; perplexity, KL, its 99th percentile and top-1 agreement equal an independent
# computation in Python from edgellm-logits --all-positions on the same windows of the Python
# tokenizer's ids (tests/data/bundled/heldout_ids.json); KL to the model itself is 0; and each
# bad input (exit 2 on usage errors, 1 on the others, the message naming the argument).
#   perplexity_cli_test.sh PERPLEXITY_BIN LOGITS_BIN SOURCE_DIR
set -uo pipefail
bin=$1
logits=$2
src=$3
target="$src/models/kjv-target-awq"
fp16="$src/models/kjv-target-fp16"
text="$src/models/kjv-heldout.txt"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# 128 tokens in windows of 64: two windows (stride 64), three (stride 32).
short=(--text "$text" --max-tokens 128 --ctx 64 --quiet --format json)
# run NAME OUT ARGS...: the tool on the short windows, stdout to OUT; its stderr must stay empty.
run() {
  local name=$1 out=$2
  shift 2
  "$bin" -m "$target" "${short[@]}" "$@" >"$out" 2>"$tmp/err" || fail "$name ran" "$(cat "$tmp/err")"
  if [ -s "$tmp/err" ]; then fail "$name --quiet: nothing on stderr" "$(cat "$tmp/err")"; fi
}
run "stride 64" "$tmp/s64.json"
run "stride 32" "$tmp/s32.json" --stride 32
run "--kl-base" "$tmp/kl.json" --kl-base "$fp16"
run "--kl-base itself" "$tmp/self.json" --fp32-reference --kl-base "$target"

# The windows' logits from edgellm-logits (the int4 model as the tool runs it by default, the
# fp16 checkpoint in fp32 reference mode as --kl-base runs it).
ids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["ids"][:128])))' \
  "$src/tests/data/bundled/heldout_ids.json")
IFS=, read -ra all <<<"$ids"
for start in 0 32 64; do
  window=$(IFS=,; echo "${all[*]:$start:64}")
  "$logits" -m "$target" --ids "$window" --all-positions --quiet --out "$tmp/m$start.json" ||
    fail "edgellm-logits window $start"
done
for start in 0 64; do
  window=$(IFS=,; echo "${all[*]:$start:64}")
  "$logits" -m "$fp16" --fp32-reference --ids "$window" --all-positions --quiet --out "$tmp/b$start.json" ||
    fail "edgellm-logits --fp32-reference window $start"
done

check=$(python3 - "$tmp" <<'EOF'
import array, json, math, sys
tmp = sys.argv[1]
def rows(name):
    """ids and logits; each logit is the float32 its shortest decimal text names."""
    d = json.load(open(f"{tmp}/{name}.json"))
    return d["ids"], [array.array("f", r).tolist() for r in d["logits"]]
def log_softmax(row):
    mx = max(row)
    lse = mx + math.log(math.fsum(math.exp(x - mx) for x in row))
    return [x - lse for x in row]
def mean_se(v):
    m = math.fsum(v) / len(v)
    var = max(0.0, math.fsum(x * x for x in v) / len(v) - m * m)
    return m, math.sqrt(var / (len(v) - 1))
def scored(starts, ctx, stride):
    """(window start, position) of each scored token: the ones no earlier window scored."""
    out = []
    for k, s in enumerate(starts):
        first = 1 if k == 0 else max(1, ctx - stride)
        out += [(s, j) for j in range(first, ctx)]
    return out
problems = []
def close(name, got, want, tol=1e-9):
    if not abs(got - want) <= tol * max(1.0, abs(want)):
        problems.append(f"{name}: tool {got!r}, independent {want!r}")
model = {s: rows(f"m{s}") for s in (0, 32, 64)}
lp = {s: [log_softmax(r) for r in model[s][1]] for s in model}
for name, starts, stride in (("s64", (0, 64), 64), ("s32", (0, 32, 64), 32)):
    tool = json.load(open(f"{tmp}/{name}.json"))
    nll = [-lp[s][j - 1][model[s][0][j]] for s, j in scored(starts, 64, stride)]
    m, se = mean_se(nll)
    for k, want in (("tokens", len(nll)), ("windows", len(starts)), ("ctx", 64), ("stride", stride)):
        if tool[k] != want:
            problems.append(f"{name} {k}: tool {tool[k]}, want {want}")
    close(f"{name} ppl", tool["ppl"], math.exp(m))
    close(f"{name} ppl_stderr", tool["ppl_stderr"], math.exp(m) * se)
tool = json.load(open(f"{tmp}/kl.json"))
base = {s: [log_softmax(r) for r in rows(f"b{s}")[1]] for s in (0, 64)}
kl, top1 = [], 0
for s, j in scored((0, 64), 64, 64):
    b, q = base[s][j - 1], lp[s][j - 1]
    kl.append(math.fsum(math.exp(x) * (x - y) for x, y in zip(b, q)))
    top1 += b.index(max(b)) == q.index(max(q))
m, se = mean_se(kl)
v = sorted(kl)
p = 0.99 * (len(v) - 1)
i = int(p)
p99 = (1 - (p - i)) * v[i] + (p - i) * v[min(i + 1, len(v) - 1)]
close("kl", tool["kl"], m)
close("kl_stderr", tool["kl_stderr"], se)
close("kl_p99", tool["kl_p99"], p99)
close("top1", tool["top1"], top1 / len(kl))
if not (tool["kl"] > 0 and 0 < tool["top1"] <= 1):
    problems.append(f"int4 against fp16: kl {tool['kl']} top1 {tool['top1']}, want kl > 0, top1 in (0, 1]")
close("kl ppl", tool["ppl"], json.load(open(f"{tmp}/s64.json"))["ppl"], 0)
self_ = json.load(open(f"{tmp}/self.json"))
if (self_["kl"], self_["kl_p99"], self_["top1"]) != (0, 0, 1):
    problems.append(f"--kl-base itself: kl {self_['kl']} p99 {self_['kl_p99']} top1 {self_['top1']}")
keys = {"model", "text", "ctx", "stride", "windows", "tokens", "nll", "ppl", "ppl_stderr"}
if not keys <= json.load(open(f"{tmp}/s64.json")).keys() or not keys | {"base", "kl", "kl_stderr", "kl_p99", "top1"} <= tool.keys():
    problems.append("JSON fields missing")
print("\n".join(problems) if problems else "match")
EOF
)
if [ "$check" = match ]; then ok "ppl, KL, p99, top-1 equal the independent computation"; else fail "independent computation" "$check"; fi

expect "text format" 0 "ppl [0-9.]+ \+/- [0-9.]+ over 63 tokens .*KL to .* top-1 agreement" -- "$bin" -m "$target" --text "$text" -n 64 -c 64 --quiet --kl-base "$fp16"
EXPECT_STREAM=stderr
# Progress only for a stage that runs over a second: these two windows take a fraction of one.
err=$("$bin" -m "$target" --text "$text" -n 128 -c 64 2>&1 >/dev/null)
if [ $? = 0 ] && ! grep -qE '^[a-z0-9 ]+: +[0-9]+%$' <<<"$err"; then
  ok "a quick run draws no progress"
else
  fail "progress of a quick run" "$err"
fi
expect "help" 0 "" -- "$bin" --help
expect "no --text" 2 "--text FILE is required" -- "$bin" -m "$target"
expect "--ctx 1" 2 "--ctx: '1' is not an integer >= 2" -- "$bin" -m "$target" --text "$text" --ctx 1
expect "--stride 0" 2 "--stride: 0 is not in \[1, --ctx 512\]" -- "$bin" -m "$target" --text "$text" --stride 0
expect "--stride above --ctx" 2 "--stride: 65 is not in \[1, --ctx 64\]" -- "$bin" -m "$target" --text "$text" -c 64 --stride 65
expect "--format xml" 2 "--format: 'xml' is not one of 'text', 'json'" -- "$bin" -m "$target" --text "$text" --format xml
expect "-n abc" 2 "-n: 'abc' is not an integer >= 1" -- "$bin" -m "$target" --text "$text" -n abc
expect "missing text file" 1 "--text: .*no-such.txt': cannot open" -- "$bin" -m "$target" --text "$tmp/no-such.txt"
: >"$tmp/empty.txt"
expect "empty text file" 1 "--text: '.*empty.txt' is empty" -- "$bin" -m "$target" --text "$tmp/empty.txt"
printf 'In the beginning\n' >"$tmp/short.txt"
expect "text shorter than a window" 1 "--text: '.*short.txt' has [0-9]+ tokens, fewer than one window of --ctx 512" -- "$bin" -m "$target" --text "$tmp/short.txt"
expect "--max-tokens below a window" 1 "\(100 with --max-tokens\), fewer than one window of --ctx 512" -- "$bin" -m "$target" --text "$text" -n 100
expect "missing model directory" 1 "--model: '.*no-such-model' is not a directory" -- "$bin" -m "$src/no-such-model" --text "$text"
mkdir -p "$tmp/no-config" && cp "$target/tokenizer.json" "$tmp/no-config/"
expect "model directory without config.json" 1 "--model: .*config.json" -- "$bin" -m "$tmp/no-config" --text "$text" -n 64 -c 64
expect "--kl-base not a directory" 1 "--kl-base: '.*' is not a directory" -- "$bin" -m "$target" --text "$text" --kl-base "$text"
expect "--kl-base of another vocabulary" 1 "--kl-base: '.*llama-fp16' has a vocabulary of 300 tokens, --model '.*' one of 4096" -- "$bin" -m "$target" --text "$text" -n 64 -c 64 --kl-base "$src/tests/data/model/llama-fp16"
# --ctx above max_position_embeddings: refused before the load unless --force-context (here a
# copy of the target whose config.json says 64 positions).
expect "--ctx above max_position_embeddings" 2 "--ctx: 4096 is above the model's max_position_embeddings 2048 .*--force-context" -- "$bin" -m "$target" --text "$text" --ctx 4096
mkdir -p "$tmp/pos64"
ln -s "$target/model.safetensors" "$target/tokenizer.json" "$tmp/pos64/"
sed -E 's/"max_position_embeddings": ?[0-9]+/"max_position_embeddings": 64/' "$target/config.json" >"$tmp/pos64/config.json"
expect "--ctx 128 on 64 positions" 2 "--ctx: 128 is above the model's max_position_embeddings 64" -- "$bin" -m "$tmp/pos64" --text "$text" -n 128 -c 128 --quiet
expect "... with --force-context" 0 "^$" -- "$bin" -m "$tmp/pos64" --text "$text" -n 128 -c 128 --quiet --force-context
expect "--kl-base's max_position_embeddings too" 2 "--ctx: 128 is above the model's max_position_embeddings 64 .*\(--kl-base '.*pos64'\)" -- "$bin" -m "$target" --text "$text" -n 128 -c 128 --quiet --kl-base "$tmp/pos64"
# -f/--text reads a pipe (`-f <(cmd)`) to its end; a device is still refused.
if "$bin" -m "$target" -f <(cat "$text") -n 64 -c 64 --quiet 2>"$tmp/pipe.err" | grep -q "ppl [0-9.]* +/- "; then
  ok "-f <(cmd)"
else
  fail "-f <(cmd)" "$(cat "$tmp/pipe.err")"
fi
expect "--text /dev/zero" 1 "--text: .*/dev/zero': is a character device, not a regular file" -- "$bin" -m "$target" --text /dev/zero

# --kv-type: the same windows with int8 and int4 caches, perplexity near the f32 cache's (the
# figures at 2048-token windows are in docs/performance.md, "KV cache types").
run "--kv-type int8" "$tmp/kv8.json" --kv-type int8
run "--kv-type int4" "$tmp/kv4.json" --kv-type int4
ppl=$(python3 -c 'import json,sys; print(" ".join(str(json.load(open(f))["ppl"]) for f in sys.argv[1:]))' \
  "$tmp/s64.json" "$tmp/kv8.json" "$tmp/kv4.json")
if python3 -c 'import sys; f, q8, q4 = map(float, sys.argv[1:]); sys.exit(not (abs(q8 / f - 1) <= 0.002 and abs(q4 / f - 1) <= 0.02))' $ppl; then
  ok "--kv-type int8 / int4: perplexity within 0.2 % / 2 % of f32's ($ppl)"
else
  fail "--kv-type int8 / int4 perplexity against f32's" "$ppl"
fi
expect "--kv-type int3" 2 "--kv-type: .*expected int8, int4, f16 or f32" -- "$bin" -m "$target" "${short[@]}" --kv-type int3

finish
