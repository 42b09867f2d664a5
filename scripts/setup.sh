#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages that building, testing and benchmarking edgellm need.
# Idempotent: when everything is present it only runs one dpkg-query and exits 0. As root it
# installs what is missing (apt-get update once, then apt-get install); otherwise it prints
# the exact command to run and exits 1.
set -euo pipefail

packages=(
  cmake ninja-build g++                       # build
  libxsimd-dev catch2 libfmt-dev              # header-only deps, tests, bench output
  g++-aarch64-linux-gnu qemu-user-static      # arm64 cross build, tests under emulation
  clang libclang-rt-14-dev                    # Clang builds, libFuzzer
  python3-torch python3-numpy python3-regex   # reference models and test data (tools/*.py)
  libopenblas0-pthread                        # numpy/torch BLAS
  bible-kjv                                   # plain-text corpus for tokenizer tests
  openjdk-17-jdk-headless                     # Java binding (bindings/java): javac, jni.h, tests
)

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup.sh: not a Debian system (no dpkg-query); install by hand: ${packages[*]}" >&2
  exit 1
fi

missing=()
installed="$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${packages[@]}" 2>/dev/null || true)"
for p in "${packages[@]}"; do
  grep -qx "$p installed" <<<"$installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: missing Debian packages: ${missing[*]}" >&2
  echo "setup.sh: run as root:  sudo sh -c '$cmd'" >&2
  exit 1
fi

echo "setup.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
