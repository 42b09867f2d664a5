// SPDX-License-Identifier: Apache-2.0
// Shared helpers for the test suite: seeded RNGs, test scale, the xsimd architectures to test.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <xsimd/xsimd.hpp>

namespace edgellm::test {

/// A generator seeded from Catch's --rng-seed, so a failure reproduces with the printed seed.
inline std::mt19937_64 make_rng(std::uint64_t salt = 0) {
  return std::mt19937_64(static_cast<std::uint64_t>(Catch::rngSeed()) * 0x9E3779B97F4A7C15ull +
                         salt);
}

/// EDGELLM_TEST_SCALE=small trims shape sweeps (sanitizer runs, arm64 under qemu).
inline bool small_scale() {
  const char* s = std::getenv("EDGELLM_TEST_SCALE");
  return s != nullptr && std::strcmp(s, "small") == 0;
}

inline std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// The xsimd architectures compiled into this test binary (the generic kernels are tested on
/// each): the best one the build flags allow plus the baseline ones below it.
using TestArchs = std::tuple<
#if XSIMD_WITH_AVX512BW
    xsimd::avx512bw,
#endif
#if XSIMD_WITH_FMA3_AVX2
    xsimd::fma3<xsimd::avx2>,
#endif
#if XSIMD_WITH_SSE4_2
    xsimd::sse4_2,
#endif
#if XSIMD_WITH_NEON64
    xsimd::neon64,
#endif
    xsimd::default_arch>;

}  // namespace edgellm::test
