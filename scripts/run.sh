#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: builds `edgellm-generate` (release preset) and generates text from the bundled
# KJV model (models/kjv-target-awq). Generated text goes to stdout, build output and statistics
# to stderr. Extra arguments go to edgellm-generate, e.g.
#   scripts/run.sh --prompt "And Jesus said" -n 64 --seed 7
#   scripts/run.sh --model /path/to/Qwen2-7B-Instruct-AWQ --chat
# The kernel bench (the main job before a model was bundled) is scripts/run.sh --bench.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null 2>&1; then
  export CMAKE_GENERATOR=Ninja
fi

cmake --preset release >&2
if [ "${1:-}" = "--bench" ]; then
  shift
  cmake --build --preset release --target edgellm-bench-kernels >&2
  args=()
  if [ "${EDGELLM_QUICK:-0}" = 1 ]; then
    args+=(--quick)
  fi
  exec build/release/bin/edgellm-bench-kernels "${args[@]}" "$@"
fi
cmake --build --preset release --target edgellm-generate >&2
if [ $# -eq 0 ]; then
  # A fixed prompt and seed: the same text on every machine with the same build.
  set -- --prompt "And God said" -n 96 --seed 1 --temperature 0.7
fi
exec build/release/bin/edgellm-generate "$@"
