#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer target tests/fuzz/fuzz_safetensors_header.cpp (safetensors header, JSON
# and config.json parsers) with clang++ and ASan + UBSan into build/fuzz, then fuzzes it.
#
#   scripts/fuzz.sh [seconds] [extra libFuzzer options...]     (default: 30 seconds)
#
# The scratch corpus build/fuzz/corpus persists between runs and starts from the committed seeds
# in tests/fuzz/corpus/safetensors (which are never written to). Crash inputs are saved in
# build/fuzz/artifacts/; reproduce one with: build/fuzz/<binary> build/fuzz/artifacts/crash-...
# Uses the top-level CMake build when it configures with clang++, else compiles directly.
# Environment: CXX_FUZZ (default clang++), JOBS (default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-30}
[ $# -gt 0 ] && shift
case "$seconds" in
  ''|*[!0-9]*) echo "fuzz.sh: the first argument is a number of seconds, got '$seconds'" >&2; exit 2 ;;
esac
cxx=${CXX_FUZZ:-clang++}
jobs=${JOBS:-2}
build=build/fuzz
name=edgellm_fuzz_safetensors_header
seeds=tests/fuzz/corpus/safetensors
mkdir -p "$build/corpus" "$build/artifacts"

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx not found (libFuzzer needs clang; set CXX_FUZZ)" >&2
  exit 2
fi

bin=""
if [ -f CMakeLists.txt ] && command -v cmake >/dev/null 2>&1; then
  echo "fuzz.sh: configuring $build with $cxx (log: $build/cmake.log)"
  if cmake -S . -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
       -DEDGELLM_BUILD_TESTS=ON -DEDGELLM_BUILD_BENCH=OFF -DEDGELLM_BUILD_EXAMPLES=OFF \
       -DEDGELLM_INSTALL=OFF -DEDGELLM_HEADER_CHECK=OFF >"$build/cmake.log" 2>&1 &&
     cmake --build "$build" --target "$name" -j "$jobs" >>"$build/cmake.log" 2>&1; then
    bin=$(find "$build" -type f -name "$name" -perm -u+x | head -n 1)
  else
    echo "fuzz.sh: the CMake build failed (tail of $build/cmake.log below); compiling directly"
    tail -n 15 "$build/cmake.log" >&2 || true
  fi
fi
if [ -z "$bin" ]; then
  bin="$build/$name"
  echo "fuzz.sh: $cxx -> $bin"
  "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -fno-omit-frame-pointer -Wall -Wextra -Wpedantic -Wshadow -I include \
    tests/fuzz/fuzz_safetensors_header.cpp -o "$bin"
fi

echo "fuzz.sh: fuzzing $bin for $seconds s"
exec "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$build/artifacts/" "$@" "$build/corpus" "$seeds"
