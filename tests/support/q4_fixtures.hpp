// SPDX-License-Identifier: Apache-2.0
// Random packed int4 matrices and error bounds shared by the kernel tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "edgellm/kernels/quantize.hpp"
#include "edgellm/kernels/reference.hpp"
#include "support/test_util.hpp"

namespace edgellm::test {

/// What a test matrix's groups look like.
enum class GroupKind { random, all_zero, extreme };

/// A random packed matrix. `extreme` uses the largest finite fp16 scales in some groups and
/// codes at both ends; `all_zero` makes every other group dequantise to zero (q == z).
inline kernels::Q4Matrix random_q4(std::mt19937_64& rng, std::size_t n, std::size_t k,
                                   std::size_t G, GroupKind kind = GroupKind::random) {
  kernels::UnpackedQ4 w;
  w.n = n;
  w.k = k;
  w.group_size = G;
  const std::size_t ng = k / G;
  std::uniform_int_distribution<int> code(0, 15);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  w.q.resize(n * k);
  w.zero.resize(n * ng);
  w.scale.resize(n * ng);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t g = 0; g < ng; ++g) {
      const std::size_t gi = r * ng + g;
      w.zero[gi] = static_cast<std::uint8_t>(code(rng));
      w.scale[gi] = kernels::f32_to_f16(scale(rng));
      const bool zero_group = kind == GroupKind::all_zero && (g + r) % 2 == 0;
      const bool extreme_group = kind == GroupKind::extreme && (g + r) % 3 == 0;
      if (extreme_group) w.scale[gi] = 0x7BFF;  // 65504, the largest finite fp16
      for (std::size_t c = 0; c < G; ++c) {
        std::uint8_t q = static_cast<std::uint8_t>(code(rng));
        if (zero_group) q = w.zero[gi];
        if (extreme_group) q = (c % 2) ? 15 : 0;
        w.q[r * k + g * G + c] = q;
      }
    }
  }
  auto packed = kernels::pack_q4(w);
  REQUIRE(packed);
  return std::move(*packed);
}

/// Tolerance of the exact fp32 kernels against the double-precision oracle, per output:
/// (G + n_groups + 4) * 2^-24 * sum_k |w x|, from the summation bound stated in gemv_q4.hpp
/// and gemm_q4.hpp (k + 2 for the GEMM's single running sum; we take the max of both),
/// plus the rounding of the bias add.
inline double exact_tolerance(const kernels::Q4Matrix& w, const float* x, std::size_t r,
                              float bias) {
  const double u = std::ldexp(1.0, -24);
  const double terms = static_cast<double>(std::max(w.group_size() + w.n_groups() + 4, w.k() + 2));
  return terms * u * (kernels::reference::abs_dot(w, x, r) + std::fabs(bias)) + 1e-30;
}

}  // namespace edgellm::test
