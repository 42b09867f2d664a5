#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages edgellm needs.
#   scripts/setup.sh          what building the library, its tools and benches needs (the main
#                             job, scripts/run.sh): a compiler, CMake, Ninja, xsimd, fmt
#   scripts/setup.sh --test   that plus what the whole test suite needs (scripts/test.sh):
#                             Catch2, the arm64 cross compiler and QEMU, Clang for libFuzzer,
#                             PyTorch and NumPy for the reference models, a JDK, the KJV text,
#                             the Vulkan headers, glslc, lavapipe and the validation layers
# Idempotent: when everything is present it only runs one dpkg-query and exits 0. As root it
# installs what is missing (apt-get update once, then apt-get install); otherwise it prints
# the exact command to run and exits 1.
set -euo pipefail

build_packages=(
  cmake ninja-build g++                       # build
  libxsimd-dev libfmt-dev                     # SIMD (the library), fmt (tools, benches)
)
test_packages=(
  catch2                                      # unit tests
  g++-aarch64-linux-gnu qemu-user-static      # arm64 cross build, tests under emulation
  clang libclang-rt-14-dev                    # Clang builds, libFuzzer
  python3-torch python3-numpy python3-regex   # reference models and test data (tools/*.py)
  libopenblas0-pthread                        # numpy/torch BLAS
  bible-kjv                                   # plain-text corpus for tokenizer tests
  openjdk-17-jdk-headless                     # Java binding (bindings/java): javac, jni.h, tests
  libvulkan-dev glslc                         # Vulkan backend: headers, shader compiler
  mesa-vulkan-drivers vulkan-validationlayers # lavapipe (Vulkan on the CPU), validation layers
  libcpp-httplib-dev pkg-config               # edgellm-server (HTTP), found through pkg-config
)

packages=("${build_packages[@]}")
case "${1:-}" in
  "") ;;
  --test) packages+=("${test_packages[@]}") ;;
  -h | --help) sed -n '3,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup.sh: unknown argument '$1' (expected nothing or --test)" >&2; exit 2 ;;
esac

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
