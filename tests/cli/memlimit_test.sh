#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/memlimit.sh on the bundled target: edgellm-generate inside a memory cgroup 4 MiB
# above edgellm-plan's peak runs to its end with no OOM kill (the plan holds under a real
# limit, with the weights' pages dropped from the cache first so that they count); far below
# the plan it is OOM-killed and the report says so; usage errors exit 2; SIGTERM to the script
# kills the command and removes its cgroup. Exit 77 (ctest: skipped) where no memory cgroup can
# be made (not root, no memory controller).
#   memlimit_test.sh MEMLIMIT_SH GENERATE_BIN PLAN_BIN SOURCE_DIR
set -uo pipefail
memlimit=$1
gen=$2
plan=$3
src=$4
model="$src/models/kjv-target-awq"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

probe=$(bash "$memlimit" --limit 64M -- true 2>&1)
if [ $? = 77 ]; then
  echo "skip: $probe"
  exit 77
fi

# The value of "key":N in the report line (the last line of stderr).
field() { sed -n 's/^memlimit: .*"'"$2"'":\([0-9.]*\).*/\1/p' <<<"$1" | tail -1; }
# The memory cgroup this shell is in (where scripts/memlimit.sh makes its own), as it finds it.
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  parent=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
else
  parent=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
fi
groups_left() {  # cgroups of scripts/memlimit.sh still present
  local n=0 d
  for d in "$parent"/edgellm-memlimit.*; do [ -d "$d" ] && n=$((n + 1)); done
  echo $n
}
before=$(groups_left)

context=256
peak=$("$plan" -m "$model" -c "$context" -t 1 --format json |
  sed -n 's/.*"peak_bytes":\([0-9]*\)}*$/\1/p')
if ! [[ $peak =~ ^[0-9]+$ ]] || [ "$peak" -le 0 ]; then
  fail "edgellm-plan gives the peak" "$peak"
  finish
  exit
fi
# The plan counts the model's memory; the process adds its runtime (heap arenas, stacks, the
# pages of the binary it reads): about 1.7 MiB on the bundled model (the least limit that runs
# is 11 MiB against a 9.35 MiB plan), so 4 MiB leaves room for other hosts.
limit=$((peak + (4 << 20)))
run=("$gen" -m "$model" -p "And God said" -n 32 -c "$context" -t 1 --quiet)
out=$(bash "$memlimit" --limit "$limit" --drop-cache "$model/model.safetensors" -- "${run[@]}" 2>&1)
rc=$?
if [ $rc = 0 ] && [ "$(field "$out" oom_kills)" = 0 ] && [ "$(field "$out" exit_status)" = 0 ] &&
   [ "$(field "$out" peak_bytes)" -gt 0 ] && [ "$(field "$out" peak_bytes)" -le "$limit" ] &&
   grep -q "And God said" <<<"$out"; then
  ok "plan peak $peak + 4 MiB: runs, no OOM kill, peak $(field "$out" peak_bytes) <= $limit"
else
  fail "plan peak $peak + 4 MiB (exit $rc)" "$out"
fi

low=$((peak / 2))
out=$(bash "$memlimit" --limit "$low" --drop-cache "$model/model.safetensors" -- "${run[@]}" 2>&1)
rc=$?
if [ $rc = 137 ] && [ "$(field "$out" oom_kills)" -ge 1 ] && [ "$(field "$out" exit_status)" = 137 ]; then
  ok "half the plan's peak: OOM-killed, exit 137, reported"
else
  fail "half the plan's peak (exit $rc)" "$out"
fi

expect "no --limit" 2 "--limit SIZE is required" -- bash "$memlimit" -- true
expect "bad size" 2 "--limit: '12X' is not a size" -- bash "$memlimit" --limit 12X -- true
expect "no command" 2 "no command to run" -- bash "$memlimit" --limit 64M
expect "missing command" 127 "'/nonexistent/cmd': command not found" -- bash "$memlimit" --limit 64M -- /nonexistent/cmd

# SIGTERM while the command runs: the command is killed and the cgroup removed.
bash "$memlimit" --limit 64M -- sleep 300 2>/dev/null &
script=$!
for _ in $(seq 50); do
  [ "$(groups_left)" -gt "$before" ] && break
  sleep 0.1
done
sleep_pid=$(pgrep -f -n "^sleep 300$" || true)
kill -TERM "$script"
wait "$script"
rc=$?
sleep 0.3
if [ $rc = 143 ] && [ "$(groups_left)" = "$before" ] &&
   { [ -z "$sleep_pid" ] || ! kill -0 "$sleep_pid" 2>/dev/null; }; then
  ok "SIGTERM: the command killed, its cgroup removed (exit 143)"
else
  fail "SIGTERM (exit $rc, cgroups $(groups_left) vs $before before, sleep ${sleep_pid:-?})"
fi
[ "$(groups_left)" = "$before" ] && ok "no cgroup left behind" || fail "cgroups left behind: $(groups_left) vs $before"
finish
