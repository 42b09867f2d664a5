# SPDX-License-Identifier: Apache-2.0
# What the tests/cli/*_test.sh scripts share: result lines, the failure count, and expect.
# Source it after `set -uo pipefail`; end the script with `finish`.
failures=0

ok() { echo "ok   $1"; }

# fail NAME [OUTPUT]: a FAIL line, with the first lines of OUTPUT indented below it.
fail() {
  echo "FAIL $1"
  [ $# -gt 1 ] && printf '%s\n' "$2" | head -20 | sed 's/^/     /'
  failures=$((failures + 1))
}

# expect NAME WANT_RC PATTERN -- CMD...: runs CMD (stdin empty, at most EXPECT_TIMEOUT seconds,
# default 120) and checks its exit code (a number, or nz: a failure that is not a signal) and
# that its output matches PATTERN (grep -E). The output is stdout and stderr together, or
# stderr alone when EXPECT_STREAM=stderr.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 4
  local out rc
  if [ "${EXPECT_STREAM:-both}" = stderr ]; then
    out=$( { timeout "${EXPECT_TIMEOUT:-120}" "$@" </dev/null 2>&1 1>&3 3>&-; } 3>/dev/null)
  else
    out=$(timeout "${EXPECT_TIMEOUT:-120}" "$@" 2>&1 </dev/null)
  fi
  rc=$?
  local good=1
  if [ "$want" = nz ]; then
    { [ $rc -ne 0 ] && [ $rc -lt 128 ]; } || good=0
  else
    [ "$rc" = "$want" ] || good=0
  fi
  # A here-string, not a pipe: grep -q exits at its first match, and under pipefail the
  # writer's SIGPIPE (a long --help on a loaded host) would turn a match into a failure.
  grep -Eq -- "$pattern" <<<"$out" || good=0
  if [ $good = 1 ]; then
    ok "$name"
  else
    fail "$name (exit $rc, wanted $want and /$pattern/):" "$out"
  fi
}

# finish: the count line; the exit status of the script.
finish() {
  echo "$failures failure(s)"
  [ $failures = 0 ]
}
