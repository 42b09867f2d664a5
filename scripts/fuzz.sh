#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets of tests/fuzz (see tests/fuzz/CMakeLists.txt for what each one
# covers) with clang++ and ASan + UBSan into build/fuzz, then fuzzes each for the given time,
# one after the other, and prints per target: executions, crashes, leaks, timeouts, ooms.
#
#   scripts/fuzz.sh [seconds] [--target NAME]... [extra libFuzzer options...]
#                   (default: 30 seconds per target; every target unless --target is given)
#
# Each target's scratch corpus build/fuzz/corpus/<name> persists between runs and starts from
# the committed seeds in tests/fuzz/corpus/<name> (never written to). Crash inputs are saved in
# build/fuzz/artifacts/<name>/; reproduce one with: build/fuzz/bin/edgellm_fuzz_<name> <file>.
# Full output of each run: build/fuzz/logs/<name>.log.
# Uses the top-level CMake build when it configures with clang++, else compiles directly.
# Environment: CXX_FUZZ (default clang++), JOBS (build jobs, default 2).
# Exit status: 0 when every target ran with no crash, leak, timeout or out-of-memory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# name and -max_len: inputs up to 1 MiB where whole files are fuzzed (as tests/fuzz/CMakeLists.txt)
all_targets=(safetensors_header tokenizer_json tokenizer_roundtrip sharded_index prompt_cache
             packed_cache checkpoint_dir chat_template)
max_len() {
  case "$1" in safetensors_header|tokenizer_roundtrip) echo 65536 ;; *) echo 1048576 ;; esac
}

seconds=30
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  seconds=$1
  shift
fi
case "$seconds" in
  ''|*[!0-9]*) echo "fuzz.sh: the first argument is a number of seconds, got '$seconds'" >&2; exit 2 ;;
esac
targets=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) [ $# -ge 2 ] || { echo "fuzz.sh: --target needs a name" >&2; exit 2; }
              targets+=("$2"); shift 2 ;;
    --target=*) targets+=("${1#--target=}"); shift ;;
    *) extra+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  case " ${all_targets[*]} " in
    *" $t "*) ;;
    *) echo "fuzz.sh: unknown target '$t' (one of: ${all_targets[*]})" >&2; exit 2 ;;
  esac
done

cxx=${CXX_FUZZ:-clang++}
jobs=${JOBS:-2}
build=build/fuzz
mkdir -p "$build/bin" "$build/logs"
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx not found (libFuzzer needs clang; set CXX_FUZZ)" >&2
  exit 2
fi

# --- build -------------------------------------------------------------------------------------
t0=$SECONDS
names=()
for t in "${targets[@]}"; do names+=("edgellm_fuzz_$t"); done
built=0
if [ -f CMakeLists.txt ] && command -v cmake >/dev/null 2>&1; then
  echo "fuzz.sh: building ${#names[@]} target(s) in $build with $cxx, -j$jobs (log: $build/cmake.log)"
  if cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
       -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$PWD/$build/bin" \
       -DEDGELLM_BUILD_TESTS=ON -DEDGELLM_BUILD_BENCH=OFF -DEDGELLM_BUILD_EXAMPLES=OFF \
       -DEDGELLM_INSTALL=OFF -DEDGELLM_HEADER_CHECK=OFF >"$build/cmake.log" 2>&1 &&
     cmake --build "$build" --target "${names[@]}" -j "$jobs" >>"$build/cmake.log" 2>&1; then
    built=1
  else
    echo "fuzz.sh: the CMake build failed (tail of $build/cmake.log below); compiling directly"
    tail -n 15 "$build/cmake.log" >&2 || true
  fi
fi
if [ "$built" -eq 0 ]; then
  for t in "${targets[@]}"; do
    echo "fuzz.sh: $cxx -> $build/bin/edgellm_fuzz_$t"
    "$cxx" -std=c++20 -g1 -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
      -fno-omit-frame-pointer -Wall -Wextra -Wpedantic -Wshadow -I include \
      -DEDGELLM_SOURCE_DIR="\"$PWD\"" "tests/fuzz/fuzz_$t.cpp" -o "$build/bin/edgellm_fuzz_$t"
  done
fi
echo "fuzz.sh: build took $((SECONDS - t0)) s"

# --- fuzz --------------------------------------------------------------------------------------
# count <file> <pattern>: lines of the log matching the pattern
count() { grep -c -E "$2" "$1" || true; }

failed=0
rows=()
for t in "${targets[@]}"; do
  bin="$build/bin/edgellm_fuzz_$t"
  work="$build/corpus/$t"
  artifacts="$build/artifacts/$t"
  log="$build/logs/$t.log"
  mkdir -p "$work" "$artifacts"
  touch "$log.start"
  echo "fuzz.sh: fuzzing $t for $seconds s (log: $log)"
  rc=0
  "$bin" -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${extra[@]}" "$work" \
    "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)
  leaks=$(count "$log" 'ERROR: LeakSanitizer')
  timeouts=$(count "$log" 'ERROR: libFuzzer: timeout')
  ooms=$(count "$log" 'ERROR: libFuzzer: out-of-memory')
  crashes=$(count "$log" 'ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|libFuzzer: (deadly signal|fuzz target exited|fuzz target overwrote))|runtime error:')
  # A non-zero exit with nothing recognised is still a failure (e.g. the binary did not start).
  if [ "$rc" -ne 0 ] && [ "$((leaks + timeouts + ooms + crashes))" -eq 0 ]; then crashes=1; fi
  [ "$((leaks + timeouts + ooms + crashes))" -eq 0 ] || failed=1
  rows+=("$(printf '%-20s %12s %8d %6d %9d %5d %s' "$t" "${execs:-0}" "$crashes" "$leaks" \
            "$timeouts" "$ooms" "$(find "$artifacts" -type f -newer "$log.start" -printf '%f ')")")
  [ "$rc" -eq 0 ] || tail -n 30 "$log" >&2
done

echo
printf '%-20s %12s %8s %6s %9s %5s %s\n' target executions crashes leaks timeouts ooms 'new artifacts'
printf '%s\n' "${rows[@]}"
if [ "$failed" -ne 0 ]; then
  echo "fuzz.sh: FAILED (inputs in $build/artifacts/<target>/)"
  exit 1
fi
echo "fuzz.sh: ok, ${#targets[@]} target(s) x $seconds s"
