#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a command inside a memory cgroup of its own with a hard limit, as a phone's low-memory
# killer would hold an app, and reports what it used: the peak charged to the cgroup (anonymous
# memory and the page cache it read, so mmapped weights count), OOM kills, major page faults
# (file pages evicted under the limit and read again), the exit status and the wall time.
#
#   scripts/memlimit.sh --limit SIZE [--drop-cache FILE]... [--] CMD [ARGS...]
#
# SIZE: bytes, or a number with K, M, G (KiB, MiB, GiB: 1024-based). --drop-cache FILE drops
# FILE's clean pages from the page cache first (GNU dd's nocache), so that the command reads
# them again under its limit: pages cached earlier stay charged to whoever read them first and
# would not count. The command's stdout and stderr pass through; the report is one JSON object
# on the last line of stderr, after "memlimit: ":
#   {"limit_bytes":N,"peak_bytes":N,"oom_kills":N,"major_faults":N,"exit_status":N,
#    "wall_seconds":X,"cgroup":"v1"|"v2"}
# The exit status is the command's (128 + signal when a signal ended it: 137 after an OOM
# kill); 2 for a usage error; 77 when no memory cgroup can be made here (not root, or no memory
# controller), which ctest reads as a skip. The cgroup is removed when the command ends, on
# Ctrl-C and on SIGTERM.
set -uo pipefail

prog=memlimit
usage() {
  echo "usage: scripts/memlimit.sh --limit SIZE [--drop-cache FILE]... [--] CMD [ARGS...]" >&2
  echo "$prog: $1" >&2
  exit 2
}

limit=""
drop=()
while [ $# -gt 0 ]; do
  case $1 in
    --limit) [ $# -ge 2 ] || usage "--limit: missing SIZE"; limit=$2; shift 2 ;;
    --limit=*) limit=${1#--limit=}; shift ;;
    --drop-cache) [ $# -ge 2 ] || usage "--drop-cache: missing FILE"; drop+=("$2"); shift 2 ;;
    -h|--help)
      sed -n '3,21p' "$0" | sed 's/^# \{0,1\}//'
      exit 0 ;;
    --) shift; break ;;
    -*) usage "unknown argument '$1'" ;;
    *) break ;;
  esac
done
[ -n "$limit" ] || usage "--limit SIZE is required"
[ $# -gt 0 ] || usage "no command to run"

# SIZE -> bytes.
if [[ $limit =~ ^([0-9]+)([KkMmGg]?)$ ]]; then
  n=${BASH_REMATCH[1]}
  case ${BASH_REMATCH[2]} in
    [Kk]) limit_bytes=$((n << 10)) ;;
    [Mm]) limit_bytes=$((n << 20)) ;;
    [Gg]) limit_bytes=$((n << 30)) ;;
    *) limit_bytes=$n ;;
  esac
else
  usage "--limit: '$limit' is not a size (bytes, or a number with K, M or G)"
fi
[ "$limit_bytes" -ge $((1 << 20)) ] || usage "--limit: $limit_bytes bytes is below 1 MiB"
for f in ${drop[@]+"${drop[@]}"}; do
  [ -f "$f" ] || usage "--drop-cache: '$f' is not a regular file"
done
command -v "$1" >/dev/null 2>&1 || { echo "$prog: '$1': command not found" >&2; exit 127; }

# The memory cgroup this shell is in, v2 (unified, with the memory controller) or v1.
version="" parent=""
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  version=v2
  parent=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
elif [ -d /sys/fs/cgroup/memory ]; then
  version=v1
  parent=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
fi
if [ -z "$version" ] || [ ! -w "$parent" ]; then
  echo "$prog: no memory cgroup to make here (needs root, or a delegated cgroup with the memory controller)" >&2
  exit 77
fi
group="$parent/edgellm-memlimit.$$"
if ! mkdir "$group" 2>/dev/null; then
  echo "$prog: cannot create the cgroup '$group'" >&2
  exit 77
fi

cleanup() {
  # Processes still in the group (a command killed by a signal to us) go first.
  if [ -f "$group/cgroup.procs" ]; then
    while read -r pid; do kill -KILL "$pid" 2>/dev/null; done <"$group/cgroup.procs"
  fi
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    rmdir "$group" 2>/dev/null && return
    sleep 0.1
  done
  echo "$prog: warning: could not remove the cgroup '$group'" >&2
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ $version = v2 ]; then
  echo "$limit_bytes" >"$group/memory.max" || { echo "$prog: cannot set memory.max" >&2; exit 77; }
  [ -f "$group/memory.swap.max" ] && echo 0 >"$group/memory.swap.max" 2>/dev/null
else
  echo "$limit_bytes" >"$group/memory.limit_in_bytes" ||
    { echo "$prog: cannot set memory.limit_in_bytes" >&2; exit 77; }
  # No swap either, where swap accounting exists (memsw may not be below the limit).
  [ -f "$group/memory.memsw.limit_in_bytes" ] &&
    echo "$limit_bytes" >"$group/memory.memsw.limit_in_bytes" 2>/dev/null
fi

for f in ${drop[@]+"${drop[@]}"}; do
  dd if="$f" iflag=nocache count=0 status=none 2>/dev/null ||
    echo "$prog: warning: could not drop the cached pages of '$f'" >&2
done

start=$(date +%s.%N)
# The child joins the group before it execs the command, so every page it touches is charged.
bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' memlimit-child "$group" "$@" &
child=$!
wait "$child" 2>/dev/null  # (bash's "Killed" job notice after an OOM kill is the report's job)
status=$?
end=$(date +%s.%N)

stat_value() {  # the value of key $2 in the "key value" file $1, or 0
  awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print 0 }' "$1" 2>/dev/null
}
if [ $version = v2 ]; then
  peak=$(cat "$group/memory.peak" 2>/dev/null || echo 0)
  ooms=$(stat_value "$group/memory.events" oom_kill)
  majflt=$(stat_value "$group/memory.stat" pgmajfault)
else
  peak=$(cat "$group/memory.max_usage_in_bytes")
  ooms=$(stat_value "$group/memory.oom_control" oom_kill)
  majflt=$(stat_value "$group/memory.stat" total_pgmajfault)
fi
wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')
printf '%s: {"limit_bytes":%s,"peak_bytes":%s,"oom_kills":%s,"major_faults":%s,"exit_status":%s,"wall_seconds":%s,"cgroup":"%s"}\n' \
  "$prog" "$limit_bytes" "$peak" "$ooms" "$majflt" "$status" "$wall" "$version" >&2
exit "$status"
