// SPDX-License-Identifier: Apache-2.0
// Scalar twins of the matmul kernels and the elementwise ops (kernels/elementwise.hpp): the
// specification and the test oracle. Plain loops.
#pragma once

#include <cmath>
#include <limits>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/q8_activations.hpp"
#include "edgellm/kernels/q8_matrix.hpp"

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

/// Fast path, step 1: per-group int8 quantisation of X [m][ldx] (see Q8ActivationsView).
inline void quantize_activations_q8(const float* x, std::size_t ldx, const Q8ActivationsView& out) {
  const std::size_t G = out.group_size, ng = out.n_groups();
  for (std::size_t i = 0; i < out.m; ++i) {
    for (std::size_t g = 0; g < ng; ++g) {
      const float* xg = x + i * ldx + g * G;
      float amax = 0.0f;
      bool finite = true;
      for (std::size_t c = 0; c < G; ++c) {
        finite = finite && std::isfinite(xg[c]);
        amax = std::max(amax, std::fabs(xg[c]));
      }
      std::int32_t sum = 0;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (std::size_t c = 0; c < G; ++c) {
        const auto q = finite ? static_cast<std::int32_t>(std::nearbyint(xg[c] * inv)) : 0;
        out.q[i * out.k + g * G + c] = static_cast<std::int8_t>(q);
        sum += q;
      }
      out.scale[i * ng + g] = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
      out.sum[i * ng + g] = sum;
    }
  }
}

/// Fast path, step 2 (W4A8): for every row i of the quantised activations and output r,
///   y[i][r] = bias[r] + sum_g fma-chain of  t_g * (s[r][g] * dx[i][g])
///   t_g = sum_{k in g} q[r][k] * xq[i][k] - z[r][g] * xsum[i][g]      (exact integer)
/// evaluated as y = fma(float(t_g), s * dx, y) over g in order, then + bias. Every microkernel
/// performs exactly these operations, so all ISAs agree with this twin bit for bit.
/// Error against the exact product W x (derived from |x - dx q| <= dx / 2 per element):
///   |y_fast - y_exact| <= sum_g (dx_g / 2) * sum_{k in g} |w[r][k]|
///                         + (n_groups + 2) * 2^-24 * sum_k |w[r][k] x[k]|  (fp32 epilogue)
/// (plus a relative 2^-24 per group for the rounding of s * dx, included in the second term).
inline void gemm_q4_fast(const Q4Matrix& w, const Q8ActivationsView& a, const float* bias,
                         float* y, std::size_t ldy) {
  const std::size_t n = w.n(), G = w.group_size(), ng = w.n_groups();
  for (std::size_t i = 0; i < a.m; ++i) {
    for (std::size_t r = 0; r < n; ++r) {
      float acc = 0.0f;
      for (std::size_t g = 0; g < ng; ++g) {
        std::int32_t dot = 0;
        for (std::size_t c = g * G; c < (g + 1) * G; ++c)
          dot += static_cast<std::int32_t>(w.code(r, c)) * a.q[i * a.k + c];
        const std::int32_t t = dot - static_cast<std::int32_t>(w.zero(r, g)) * a.sum[i * ng + g];
        const float sdx = f16_to_f32(w.scale_bits(r, g)) * a.scale[i * ng + g];
        acc = std::fma(static_cast<float>(t), sdx, acc);
      }
      y[i * ldy + r] = acc + (bias ? bias[r] : 0.0f);
    }
  }
}

/// The fast path's error bound for output r and one activation row x (see gemm_q4_fast).
inline double fast_error_bound(const Q4Matrix& w, const float* x, std::size_t r) {
  const std::size_t G = w.group_size(), ng = w.n_groups();
  double bound = 0.0;
  for (std::size_t g = 0; g < ng; ++g) {
    double amax = 0.0, wsum = 0.0;
    for (std::size_t c = g * G; c < (g + 1) * G; ++c) {
      amax = std::max(amax, static_cast<double>(std::fabs(x[c])));
      wsum += std::fabs((static_cast<int>(w.code(r, c)) - static_cast<int>(w.zero(r, g))) *
                        static_cast<double>(f16_to_f32(w.scale_bits(r, g))));
    }
    // dx is amax / 127 rounded to fp32: allow its relative rounding too.
    bound += (amax / 127.0) * (1.0 + 1e-6) * 0.5 * wsum;
  }
  // The fp32 epilogue rounds terms whose magnitudes add up to at most abs_dot + bound.
  return bound + static_cast<double>(ng + 2) * std::ldexp(1.0, -24) * (abs_dot(w, x, r) + bound) * 1.01;
}

/// int8 weights (Q8Matrix), exact path: y[i][r] = bias[r] + sum_k X[i][k] * q[r][k] * s[r][k / G]
/// in double (each q * s and its product with x exact in double), cast to fp32 once. The exact
/// kernel (gemm_q8.hpp) is tested against this within its fp32 summation bound.
inline void gemm_q8(const Q8Matrix& w, const float* x, std::size_t ldx, float* y, std::size_t ldy,
                    std::size_t m, const float* bias) {
  const std::size_t n = w.n(), k = w.k(), G = w.group_size();
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t r = 0; r < n; ++r) {
      double acc = bias ? static_cast<double>(bias[r]) : 0.0;
      for (std::size_t c = 0; c < k; ++c)
        acc += static_cast<double>(w.codes(r)[c]) * static_cast<double>(w.scales(r)[c / G]) *
               static_cast<double>(x[i * ldx + c]);
      y[i * ldy + r] = static_cast<float>(acc);
    }
  }
}

/// sum_k |w[r][k] x[k]| of an int8 row (the scale of a dot product's rounding error).
inline double abs_dot(const Q8Matrix& w, const float* x, std::size_t r) {
  double acc = 0.0;
  for (std::size_t c = 0; c < w.k(); ++c)
    acc += std::fabs(static_cast<double>(w.codes(r)[c]) *
                     static_cast<double>(w.scales(r)[c / w.group_size()]) * x[c]);
  return acc;
}

/// int8 weights, fast path (W8A8): for every row i of the quantised activations and output r,
///   t_g = sum_{k in g} q[r][k] * xq[i][k]                          (exact int32)
///   y = fma(float(t_g), s[r][g] * dx[i][g], y) over g in order, then y + bias[r].
/// Error against the exact product (|x - dx xq| <= dx / 2 per element):
///   |y_fast - y_exact| <= sum_g (dx_g / 2) sum_{k in g} |w[r][k]| + (n_groups + 2) 2^-24 (...)
/// as for gemm_q4_fast (fast_error_bound below).
inline void gemm_q8_fast(const Q8Matrix& w, const Q8ActivationsView& a, const float* bias,
                         float* y, std::size_t ldy) {
  const std::size_t n = w.n(), G = w.group_size(), ng = w.n_groups();
  for (std::size_t i = 0; i < a.m; ++i) {
    for (std::size_t r = 0; r < n; ++r) {
      float acc = 0.0f;
      for (std::size_t g = 0; g < ng; ++g) {
        std::int32_t dot = 0;
        for (std::size_t c = g * G; c < (g + 1) * G; ++c)
          dot += static_cast<std::int32_t>(w.codes(r)[c]) * a.q[i * a.k + c];
        acc = std::fma(static_cast<float>(dot), w.scales(r)[g] * a.scale[i * ng + g], acc);
      }
      y[i * ldy + r] = acc + (bias ? bias[r] : 0.0f);
    }
  }
}

/// The int8 fast path's error bound for output r and one activation row x.
inline double fast_error_bound(const Q8Matrix& w, const float* x, std::size_t r) {
  const std::size_t G = w.group_size(), ng = w.n_groups();
  double bound = 0.0;
  for (std::size_t g = 0; g < ng; ++g) {
    double amax = 0.0, wsum = 0.0;
    for (std::size_t c = g * G; c < (g + 1) * G; ++c) {
      amax = std::max(amax, static_cast<double>(std::fabs(x[c])));
      wsum += std::fabs(static_cast<double>(w.codes(r)[c]) * w.scales(r)[g]);
    }
    bound += (amax / 127.0) * (1.0 + 1e-6) * 0.5 * wsum;
  }
  return bound +
         static_cast<double>(ng + 2) * std::ldexp(1.0, -24) * (abs_dot(w, x, r) + bound) * 1.01;
}


/// Twin of kernels::rms_norm: rows [r0, r1) of x [rows][n], one sequential double sum of
/// squares per row, the normalisation in double, rounded once to fp32.
inline void rms_norm(const float* x, const float* weight, float* out, std::size_t n,
                     std::size_t r0, std::size_t r1, float eps) {
  for (std::size_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    double ss = 0.0;
    for (std::size_t c = 0; c < n; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
    for (std::size_t c = 0; c < n; ++c)
      out[r * n + c] = static_cast<float>(static_cast<double>(xr[c]) * inv * weight[c]);
  }
}

/// Twin of kernels::silu_mul in double: g[i] = g[i] / (1 + exp(-g[i])) * u[i].
inline void silu_mul(float* g, const float* u, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double x = g[i];
    g[i] = static_cast<float>(x / (1.0 + std::exp(-x)) * static_cast<double>(u[i]));
  }
}

/// Twin of kernels::rope: the same tables (kernels::rope_tables, the fp32 angles HF uses), the
/// rotation in double. v: [rows][heads][head_dim]; cos, sin: [rows][head_dim / 2].
inline void rope(float* v, std::size_t rows, std::size_t heads, std::size_t head_dim,
                 const float* cos, const float* sin) {
  const std::size_t half = head_dim / 2;
  for (std::size_t t = 0; t < rows; ++t) {
    for (std::size_t h = 0; h < heads; ++h) {
      float* p = v + (t * heads + h) * head_dim;
      for (std::size_t i = 0; i < half; ++i) {
        const double a = p[i], b = p[i + half], c = cos[t * half + i], s = sin[t * half + i];
        p[i] = static_cast<float>(a * c - b * s);
        p[i + half] = static_cast<float>(b * c + a * s);
      }
    }
  }
}

/// Twin of kernels::add: x[i] += y[i].
inline void add(float* x, const float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace edgellm::kernels::reference
