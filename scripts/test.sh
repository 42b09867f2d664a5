#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CI suite: host release build + all tests (unit, header checks, packaging, bench smoke),
# then ASan/UBSan unit tests, then ThreadSanitizer on the session and thread pool tests, then
# the arm64 cross build with its tests under qemu-aarch64 (all on -cpu max; the kernel group and
# the model group's [isa] cases also on cortex-a53 and cortex-a76, so each run-time dispatch
# branch runs; its executables are -static, and two benches run again under qemu without a
# sysroot), then every libFuzzer target for EDGELLM_FUZZ_SECONDS (default 10) each
# (scripts/fuzz.sh: a clang++ ASan/UBSan build in build/fuzz; EDGELLM_FUZZ_SECONDS=0 skips it).
# CI's budget is 90 minutes on a 2-core host: the summary prints each stage's seconds.
# Each preset runs configure -> build -> ctest; a failure skips the rest of that preset only.
# The last line sums ctest's test counts over all presets as "test.sh: N passed, M failed"; a
# configure or build that failed counts as one failed test. Exit status: 0 only if all passed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

start=$SECONDS
bash scripts/setup.sh --test || { echo "test.sh: setup failed"; echo "test.sh: 0 passed, 1 failed"; exit 1; }

# Ninja when available (scripts/setup.sh installs it); an existing build tree keeps its own.
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null 2>&1; then
  export CMAKE_GENERATOR=Ninja
fi

presets=(${EDGELLM_TEST_PRESETS:-release asan tsan aarch64})
passed=0
failed=0
summary=()

stage() {  # stage <label> <command...>: runs it, records its time and result
  local label=$1 t0=$SECONDS rc
  shift
  echo "=== ${label}: $*"
  "$@"
  rc=$?
  echo "=== ${label}: exit ${rc} after $((SECONDS - t0)) s (suite at $((SECONDS - start)) s)"
  if [ "$rc" -eq 0 ]; then
    summary+=("$(printf '%-20s ok    %5d s' "$label" $((SECONDS - t0)))")
  else
    summary+=("$(printf '%-20s FAIL  %5d s  (exit %d)' "$label" $((SECONDS - t0)) "$rc")")
  fi
  return "$rc"
}

run_ctest() {  # run_ctest <preset>: ctest with the preset, adding its counts to the totals
  local preset=$1 log rc line
  log="build/${preset}/ctest.log"
  ctest --preset "$preset" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # "100% tests passed, 0 tests failed out of 12"
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  if [ -n "$line" ]; then
    local nfail ntotal
    nfail=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    ntotal=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
    passed=$((passed + ntotal - nfail))
    failed=$((failed + nfail))
    [ "$rc" -ne 0 ] && [ "$nfail" -eq 0 ] && failed=$((failed + 1))
  elif [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
  fi
  return "$rc"
}

# The arm64 suite's record of the run-time dispatch: per ctest entry (one per emulated CPU
# model), the microkernel picked as best and the ones checked against the scalar twin, and the
# isa column of the kernel bench rows.
dispatch_report() {
  local log="build/$1/Testing/Temporary/LastTest.log"
  [ -f "$log" ] || return 0
  echo "=== $1: microkernels by CPU model (entries without @<model> ran on the default, -cpu max)"
  awk '
    /^[0-9]+\/[0-9]+ Testing: / { flush(); name = $3; best = ""; checked = ""; rows = "" }
    match($0, /best microkernel on this CPU: [a-z0-9_]+/) { best = substr($0, RSTART + 30, RLENGTH - 30) }
    /^# best_isa=/ { best = substr($0, 12) }
    match($0, /checking microkernel [a-z0-9_]+/) { checked = checked " " substr($0, RSTART + 21, RLENGTH - 21) }
    /^(gemv|gemm)[a-z_]*\t/ { split($0, f, "\t"); if (f[3] == "fast" && index(rows, " " f[4] " ") == 0) rows = rows " " f[4] " " }
    function flush() {
      gsub(/ +/, " ", rows)
      if (name != "" && (best != "" || checked != "" || rows != ""))
        printf "  %-28s best: %-13s%s%s\n", name, best, checked == "" ? "" : " checked:" checked,
               rows == "" ? "" : " bench rows:" rows
    }
    END { flush() }' "$log"
}

# The arm64 executables are linked -static: they run under qemu with no -L (no sysroot), as a
# device runs them after adb push. The Armv8.0 model (cortex-a53) runs a whole model.
static_smoke() {
  local bin="build/$1/bin" qemu
  qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64) || return 1
  "$qemu" -cpu max "$bin/edgellm-bench-kernels" --quick --path fast --isa all &&
    "$qemu" -cpu cortex-a53 "$bin/edgellm-bench" --quick --no-lock \
      -m tests/data/model/qwen2-awq-gemm
}

for preset in "${presets[@]}"; do
  if stage "${preset} configure" cmake --preset "$preset" -DEDGELLM_REQUIRE_TESTS=ON &&
     stage "${preset} build" cmake --build --preset "$preset"; then
    if [ "$preset" != aarch64-static ]; then  # aarch64-static has no tests
      stage "${preset} ctest" run_ctest "$preset"
    fi
    case "$preset" in
      aarch64*)
        [ "$preset" = aarch64-static ] || dispatch_report "$preset"
        if stage "${preset} static run" static_smoke "$preset"; then
          passed=$((passed + 1))
        else
          failed=$((failed + 1))
        fi
        ;;
    esac
  else
    failed=$((failed + 1))
  fi
done

# The fuzz stage: each target fuzzed briefly so the harnesses keep compiling and a regression in
# a parser shows. Counts as one test.
fuzz_seconds=${EDGELLM_FUZZ_SECONDS:-10}
if [ "$fuzz_seconds" != 0 ]; then
  if stage "fuzz ${fuzz_seconds}s/target" bash scripts/fuzz.sh "$fuzz_seconds"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
fi

echo
echo "=== summary (total $((SECONDS - start)) s)"
printf '%s\n' "${summary[@]}"
echo "test.sh: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
