// SPDX-License-Identifier: Apache-2.0
// Scalar twins of the matmul kernels: the specification and the test oracle. Plain loops.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"

namespace edgellm::kernels::reference {

/// Exact path, decode: y[r] = bias[r] + sum_k w[r][k] * x[k] with w = (q - z) * s.
/// Every dequantised weight is exact in fp32 and every product w * x is exact in double, so the
/// only rounding is the double accumulation and the final cast: the result is the correctly
/// rounded dot product up to ~k * 2^-53 relative to sum |w x|. The fast kernels are tested
/// against this with the error bounds stated in their headers.
/// x: [k], y: [n], bias: [n] or null.
inline void gemv_q4(const Q4Matrix& w, const float* x, float* y, const float* bias) {
  const std::size_t n = w.n(), k = w.k(), G = w.group_size();
  for (std::size_t r = 0; r < n; ++r) {
    double acc = bias ? static_cast<double>(bias[r]) : 0.0;
    for (std::size_t c = 0; c < k; ++c) {
      const std::size_t g = c / G;
      const float wv = static_cast<float>(static_cast<int>(w.code(r, c)) -
                                          static_cast<int>(w.zero(r, g))) *
                       f16_to_f32(w.scale_bits(r, g));
      acc += static_cast<double>(wv) * static_cast<double>(x[c]);
    }
    y[r] = static_cast<float>(acc);
  }
}

/// Exact path, prefill: Y[i][r] = bias[r] + sum_k X[i][k] * w[r][k] for i < m (Y = X W^T).
/// X: [m][ldx] (ldx >= k), Y: [m][ldy] (ldy >= n), row-major.
inline void gemm_q4(const Q4Matrix& w, const float* x, std::size_t ldx, float* y, std::size_t ldy,
                    std::size_t m, const float* bias) {
  for (std::size_t i = 0; i < m; ++i) gemv_q4(w, x + i * ldx, y + i * ldy, bias);
}

/// sum over (r, c) of |w[r][c] * x[c]| for row r: the scale of the rounding error of a dot
/// product, used by tests to derive tolerances.
inline double abs_dot(const Q4Matrix& w, const float* x, std::size_t r) {
  const std::size_t k = w.k(), G = w.group_size();
  double acc = 0.0;
  for (std::size_t c = 0; c < k; ++c) {
    const std::size_t g = c / G;
    const double wv = (static_cast<int>(w.code(r, c)) - static_cast<int>(w.zero(r, g))) *
                      static_cast<double>(f16_to_f32(w.scale_bits(r, g)));
    acc += std::fabs(wv * static_cast<double>(x[c]));
  }
  return acc;
}

}  // namespace edgellm::kernels::reference
