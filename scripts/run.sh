#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: builds the release preset's kernel bench and runs it. Results (TSV: `# key=value`
# metadata, a header, one row per kernel) go to stdout; build output and chatter to stderr.
# EDGELLM_QUICK=1 runs the bench with --quick. Extra arguments go to the bench, e.g.
#   scripts/run.sh --format json --threads 1,2
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null 2>&1; then
  export CMAKE_GENERATOR=Ninja
fi

bench=kernels
if [ ! -f "bench/bench_${bench}.cpp" ]; then
  echo "run.sh: bench/bench_${bench}.cpp does not exist yet" >&2
  exit 1
fi
cmake --preset release >&2
cmake --build --preset release --target "edgellm-bench-${bench}" >&2

args=()
if [ "${EDGELLM_QUICK:-0}" = 1 ]; then
  args+=(--quick)
fi
exec "build/release/bin/edgellm-bench-${bench}" "${args[@]}" "$@"
