#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmarks edgellm on an arm64 device over adb: pushes the static bench binaries (preset
# aarch64-static) and a model directory to /data/local/tmp/edgellm, runs the kernel and
# end-to-end benches there with JSON output (one array of rows each), and pulls the rows back to bench-results/<serial>/.
#
#   cmake --preset aarch64-static && cmake --build --preset aarch64-static
#   scripts/device-bench.sh [-m MODEL_DIR] [-s SERIAL] [-b BUILD_DIR] [-- ARGS for both benches]
#
# Without adb (or without a device) it says what to install or check and exits 1; with
# --dry-run it prints the adb commands instead of running them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

model=models/kjv-target-awq
serial=""
build=build/aarch64-static
dry=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    -s) serial=$2; shift 2 ;;
    -b) build=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '3,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "device-bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [ "$dry" -eq 0 ] && ! command -v adb >/dev/null 2>&1; then
  cat >&2 <<'EOF'
device-bench.sh: adb not found. Install Android platform-tools (Debian: apt-get install adb,
or https://developer.android.com/tools/releases/platform-tools), enable USB debugging on the
device (Settings > About phone > tap Build number 7 times, then Developer options > USB
debugging), plug it in and accept the prompt; `adb devices` must list it as "device".
On a Linux board without adb, copy the files yourself (scp) and run the same commands;
  scripts/device-bench.sh --dry-run
prints them.
EOF
  exit 1
fi

remote=/data/local/tmp/edgellm
bins=(edgellm-bench-kernels edgellm-bench edgellm-generate)
for b in "${bins[@]}"; do
  if [ ! -x "$build/bin/$b" ]; then
    echo "device-bench.sh: $build/bin/$b is missing; build it first:" >&2
    echo "  cmake --preset aarch64-static && cmake --build --preset aarch64-static" >&2
    exit 1
  fi
done
if [ ! -f "$model/config.json" ]; then
  echo "device-bench.sh: $model is not a model directory (no config.json); pass -m DIR" >&2
  exit 1
fi

adb_cmd=(adb)
[ -n "$serial" ] && adb_cmd+=(-s "$serial")
run() {  # echoes, then runs unless --dry-run
  echo "+ $*"
  [ "$dry" -eq 1 ] || "$@"
}

if [ "$dry" -eq 0 ]; then
  state=$("${adb_cmd[@]}" get-state 2>/dev/null || true)
  if [ "$state" != "device" ]; then
    echo "device-bench.sh: no device ready (adb get-state: '${state:-none}'); check 'adb devices'" >&2
    exit 1
  fi
  [ -n "$serial" ] || serial=$("${adb_cmd[@]}" get-serialno)
fi

out="bench-results/${serial:-device}"
mkdir -p "$out"
name=$(basename "$model")
run "${adb_cmd[@]}" shell mkdir -p "$remote/models"
for b in "${bins[@]}"; do run "${adb_cmd[@]}" push "$build/bin/$b" "$remote/$b"; done
run "${adb_cmd[@]}" push "$model" "$remote/models/$name"
run "${adb_cmd[@]}" shell chmod 755 "${bins[@]/#/$remote/}"
# The benches print the device's CPU, performance cores and chosen microkernel in their
# metadata header; JSON rows go to files on the device, then come back.
run "${adb_cmd[@]}" shell "cd $remote && ./edgellm-bench-kernels --quick --isa all -o json ${extra[*]} > kernels.json"
run "${adb_cmd[@]}" shell "cd $remote && ./edgellm-bench -m models/$name --no-lock -o json ${extra[*]} > e2e.json"
run "${adb_cmd[@]}" pull "$remote/kernels.json" "$out/kernels.json"
run "${adb_cmd[@]}" pull "$remote/e2e.json" "$out/e2e.json"
echo "device-bench.sh: results in $out/ (kernels.json, e2e.json)"
