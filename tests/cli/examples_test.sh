#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every example that takes a model directory (and the README's snippet, built as
# edgellm-example-readme) pointed at a directory that does not exist: a message naming it and a
# non-zero exit, never an abort (an unchecked result would end in std::bad_variant_access).
#   examples_test.sh BIN_DIR
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
missing="$tmp/no-such-model"
failures=0
ran=0
for exe in "$bin"/edgellm-example-*; do
  name=${exe##*/edgellm-example-}
  case "$name" in int4-matmul | vulkan-gemv) continue ;; esac  # no model: synthetic weights only
  out=$("$exe" "$missing" 2>&1 </dev/null)
  rc=$?
  ran=$((ran + 1))
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "no-such-model" <<<"$out"; then
    echo "ok   $name (exit $rc): $(printf '%s\n' "$out" | head -1)"
  else
    echo "FAIL $name (exit $rc, wanted 1..127 and a message naming the directory):"
    printf '%s\n' "$out" | head -10 | sed 's/^/     /'
    failures=$((failures + 1))
  fi
done
if [ $ran -lt 5 ]; then
  echo "FAIL only $ran examples found in $bin (expected 4 and the README snippet)"
  failures=$((failures + 1))
fi
echo "examples_test.sh: $ran run, $failures failed"
[ $failures -eq 0 ]
