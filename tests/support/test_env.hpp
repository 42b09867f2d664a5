// SPDX-License-Identifier: Apache-2.0
// Where the tests find repository files (EDGELLM_SOURCE_DIR) and how big they run
// (EDGELLM_TEST_SCALE).
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace edgellm::test {

/// The repository root: the EDGELLM_SOURCE_DIR environment variable (ctest sets it), else the
/// path CMake compiled in, else ".". Use it as `source_dir() + "/tests/data/x.bin"`.
inline std::string source_dir() {
  if (const char* env = std::getenv("EDGELLM_SOURCE_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
#ifdef EDGELLM_SOURCE_DIR
  return EDGELLM_SOURCE_DIR;
#else
  return ".";
#endif
}

/// Test size. `small` under emulation (aarch64 via qemu) and sanitizers, where the suite must
/// stay fast; `full` otherwise. Set with EDGELLM_TEST_SCALE=small|full (unset means full).
enum class scale { small, full };

inline scale test_scale() {
  const char* env = std::getenv("EDGELLM_TEST_SCALE");
  return env != nullptr && std::string_view(env) == "small" ? scale::small : scale::full;
}

/// `full_value` normally, `small_value` when EDGELLM_TEST_SCALE=small; for loop counts and sizes.
template <class T>
T scaled(T full_value, T small_value) {
  return test_scale() == scale::small ? small_value : full_value;
}

}  // namespace edgellm::test
