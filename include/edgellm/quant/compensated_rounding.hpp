// SPDX-License-Identifier: Apache-2.0
// Error-compensated rounding of a linear's weights to a fixed asymmetric grid (GPTQ's update,
// applied within each input group): the grid of every (row, group) -- its scale and zero point --
// is the one round-to-nearest chooses, but the codes are chosen one input at a time, and the
// rounding error of input i is spread over the group's later inputs in proportion to how the
// calibration inputs correlate, so that the group's partial dot products over those inputs move
// as little as possible. Round-to-nearest minimises each weight's own error; this minimises
// (approximately, greedily) the error of the outputs, sum_t (x_t . d)^2 = d^T H d, the quantity
// AWQ's clip search also scores. The stored format is unchanged: same scales, zeros and codes
// range, so any AutoAWQ loader reads the result.
//
// Per group g with H = H_g + lambda I (lambda = damp x mean diag H_g, which keeps H invertible
// where inputs are rare or collinear) and U the upper Cholesky factor of H^-1 (U^T U = H^-1):
//   for i = 0 .. G-1:  q_i = clamp(round(w_i / s) + z, 0, max_code)
//                      e   = (w_i - (q_i - z) s) / U_ii
//                      w_j -= e U_ij  for j > i
// (Frantar et al., "GPTQ", 2022, with the group's own grid and no reordering.)
#pragma once

#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "edgellm/quant/awq_search.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace edgellm::quant {

struct CompensationOptions {
  double damp = 0.01;  ///< lambda = damp x the mean of H's diagonal (GPTQ's default)
};

namespace detail {

/// In place: the lower triangle of A [G][G] (symmetric, row-major) becomes L with A = L L^T
/// (the upper triangle is left as it was). False when A is not positive definite.
inline bool cholesky_lower(std::vector<double>& A, std::size_t G) {
  for (std::size_t j = 0; j < G; ++j) {
    double d = A[j * G + j];
    for (std::size_t p = 0; p < j; ++p) d -= A[j * G + p] * A[j * G + p];
    if (!(d > 0.0)) return false;
    d = std::sqrt(d);
    A[j * G + j] = d;
    for (std::size_t i = j + 1; i < G; ++i) {
      double v = A[i * G + j];
      for (std::size_t p = 0; p < j; ++p) v -= A[i * G + p] * A[j * G + p];
      A[i * G + j] = v / d;
    }
  }
  return true;
}

/// In place: H [G][G] (symmetric, row-major, double) becomes U, the upper triangular factor with
/// U^T U = (H + lambda I)^-1. False when H + lambda I is not positive definite (an all-zero
/// group of inputs: lambda = 0), and then the caller rounds to nearest.
inline bool inverse_cholesky_upper(std::vector<double>& H, std::size_t G, double damp) {
  double mean_diag = 0.0;
  for (std::size_t i = 0; i < G; ++i) mean_diag += H[i * G + i];
  mean_diag /= double(G);
  const double lambda = damp * mean_diag;
  for (std::size_t i = 0; i < G; ++i) {
    // An input that never occurs has no say in the outputs: its own error is then what counts.
    if (H[i * G + i] == 0.0) H[i * G + i] = mean_diag > 0.0 ? mean_diag : 1.0;
    H[i * G + i] += lambda;
  }
  if (!cholesky_lower(H, G)) return false;  // H = L L^T
  // Linv = L^-1 (lower), then A = H^-1 = Linv^T Linv.
  std::vector<double> Li(G * G, 0.0);
  for (std::size_t j = 0; j < G; ++j) {
    Li[j * G + j] = 1.0 / H[j * G + j];
    for (std::size_t i = j + 1; i < G; ++i) {
      double v = 0.0;
      for (std::size_t p = j; p < i; ++p) v -= H[i * G + p] * Li[p * G + j];
      Li[i * G + j] = v / H[i * G + i];
    }
  }
  std::vector<double> A(G * G, 0.0);
  for (std::size_t i = 0; i < G; ++i)
    for (std::size_t j = 0; j <= i; ++j) {
      double v = 0.0;
      for (std::size_t p = i; p < G; ++p) v += Li[p * G + i] * Li[p * G + j];
      A[i * G + j] = A[j * G + i] = v;
    }
  // U = the upper factor of A: A = U^T U, i.e. the transpose of A's lower Cholesky factor.
  if (!cholesky_lower(A, G)) return false;
  for (std::size_t i = 0; i < G; ++i)
    for (std::size_t j = 0; j < G; ++j) H[i * G + j] = j >= i ? A[j * G + i] : 0.0;
  return true;
}

/// The codes of one row's group w [G] on the grid (s, z, max_code), compensated through U
/// [G][G] (or rounded to nearest when U is null). Writes q [G].
inline void round_group(const float* w, std::size_t G, const double* U, float s, float z,
                        float max_code, std::uint8_t* q) {
  std::vector<double> v(w, w + G);
  for (std::size_t i = 0; i < G; ++i) {
    const float qi = std::clamp(std::nearbyint(static_cast<float>(v[i]) / s) + z, 0.0f, max_code);
    q[i] = static_cast<std::uint8_t>(qi);
    if (!U) continue;
    const double e = (v[i] - double((qi - z) * s)) / U[i * G + i];
    for (std::size_t j = i + 1; j < G; ++j) v[j] -= e * U[i * G + j];
  }
}

}  // namespace detail

/// The Gram matrices [k / G][G][G] of all m rows of X [m][k] (group_grams over every token):
/// what the functions below weigh rounding errors with. Linears that share an input share them.
inline std::vector<float> input_grams(std::span<const float> x, std::size_t m, std::size_t k,
                                      std::size_t G, ThreadPool* pool = nullptr) {
  std::vector<std::size_t> tokens(m);
  for (std::size_t t = 0; t < m; ++t) tokens[t] = t;
  return group_grams(x, k, G, tokens, pool);
}

/// Re-chooses the codes of `u` (the round-to-nearest quantisation of W [n][k], whose scales and
/// zeros stay) by error-compensated rounding against the Gram matrices `gram` [k / G][G][G] of
/// W's inputs (input_grams). Groups split over pool; the result does not depend on the thread
/// count. Errors: shapes that disagree (nothing changed).
inline status compensate_codes(kernels::UnpackedQ4& u, std::span<const float> w,
                               std::span<const float> gram,
                               const CompensationOptions& options = {},
                               ThreadPool* pool = nullptr) {
  constexpr std::string_view where = "quant::compensate_codes";
  const std::size_t n = u.n, k = u.k, G = u.group_size;
  if (G == 0 || k % G != 0 || w.size() != n * k || gram.size() != k * G)
    return make_error(errc::shape_mismatch, where,
                      "w: size " + std::to_string(w.size()) + " (n * k = " +
                          std::to_string(n * k) + "), gram: size " + std::to_string(gram.size()) +
                          " (k / G groups of G x G = " + std::to_string(k * G) + ")");
  const std::size_t ng = k / G;
  parallel_for_balanced(pool, ng, 1, [&](std::size_t g0, std::size_t g1) {
    std::vector<double> U(G * G);
    for (std::size_t g = g0; g < g1; ++g) {
      std::copy(gram.begin() + g * G * G, gram.begin() + (g + 1) * G * G, U.begin());
      const bool ok = detail::inverse_cholesky_upper(U, G, options.damp);
      for (std::size_t r = 0; r < n; ++r) {
        const float s = kernels::f16_to_f32(u.scale[r * ng + g]);
        detail::round_group(w.data() + r * k + g * G, G, ok ? U.data() : nullptr, s,
                            float(u.zero[r * ng + g]), 15.0f, u.q.data() + r * k + g * G);
      }
    }
  });
  return {};
}

/// As compensate_codes for an asymmetric grid of any width (spec.bits 2..8, not symmetric): W [n][k]
/// is replaced in place by the dequantised values (q - z) s, on fake_quantize_group's grid.
inline status compensate_fake_quantize(std::span<float> w, std::size_t n, std::size_t k,
                                       const QuantSpec& spec, std::span<const float> gram,
                                       const CompensationOptions& options = {},
                                       ThreadPool* pool = nullptr) {
  constexpr std::string_view where = "quant::compensate_fake_quantize";
  if (auto st = check_spec(spec, k, where); !st) return st;
  if (spec.kept() || spec.symmetric)
    return make_error(errc::invalid_argument, where,
                      "spec: an asymmetric grid of 2 to 8 bits (not kept, not symmetric)");
  const std::size_t G = spec.group, ng = k / G;
  if (w.size() != n * k || gram.size() != k * G)
    return make_error(errc::shape_mismatch, where,
                      "w: size " + std::to_string(w.size()) + " (n * k = " +
                          std::to_string(n * k) + "), gram: size " + std::to_string(gram.size()) +
                          " (k / G groups of G x G = " + std::to_string(k * G) + ")");
  const float mc = float(spec.max_code());
  parallel_for_balanced(pool, ng, 1, [&](std::size_t g0, std::size_t g1) {
    std::vector<double> U(G * G);
    std::vector<std::uint8_t> q(G);
    for (std::size_t g = g0; g < g1; ++g) {
      std::copy(gram.begin() + g * G * G, gram.begin() + (g + 1) * G * G, U.begin());
      const bool ok = detail::inverse_cholesky_upper(U, G, options.damp);
      for (std::size_t r = 0; r < n; ++r) {
        float* wg = w.data() + r * k + g * G;
        // fake_quantize_group's grid (the range widened to include 0, fp16 scale).
        float lo = 0.0f, hi = 0.0f;
        for (std::size_t i = 0; i < G; ++i) {
          lo = std::min(lo, wg[i]);
          hi = std::max(hi, wg[i]);
        }
        const float s = kernels::f16_to_f32(kernels::f32_to_f16(std::max(hi - lo, 1e-5f) / mc));
        const float z = std::clamp(-std::nearbyint(lo / s), 0.0f, mc);
        detail::round_group(wg, G, ok ? U.data() : nullptr, s, z, mc, q.data());
        for (std::size_t i = 0; i < G; ++i) wg[i] = (float(q[i]) - z) * s;
      }
    }
  });
  return {};
}

}  // namespace edgellm::quant
