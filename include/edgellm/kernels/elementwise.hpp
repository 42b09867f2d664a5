// SPDX-License-Identifier: Apache-2.0
// The elementwise and row-wise ops of a decoder layer, fp32: RMSNorm, RoPE (rotate_half),
// SiLU * up, the residual add. Their scalar twins are in kernels/reference.hpp.
#pragma once

#include "edgellm/config.hpp"
#include "edgellm/detail/diagnostics.hpp"

#include <cmath>
#include <cstddef>

#include <xsimd/xsimd.hpp>

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

/// out[r][:] = x[r][:] / sqrt(mean(x[r]^2) + eps) * weight for rows [r0, r1).
///   x, out: [rows][n] (row r at r * n); weight: [n].
/// The mean of squares is accumulated in double in 8 partial sums (lane j: columns j, j + 8, ...)
/// combined by a fixed tree, then rounded to fp32: the same bits on every ISA, and no chain of
/// dependent scalar adds (the compiler vectorises the lanes).
inline void rms_norm(const float* x, const float* weight, float* out, std::size_t n,
                     std::size_t r0, std::size_t r1, float eps) noexcept {
  for (std::size_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    double part[8] = {};
    std::size_t c = 0;
    for (; c + 8 <= n; c += 8)
      for (std::size_t j = 0; j < 8; ++j)
        part[j] += static_cast<double>(xr[c + j]) * static_cast<double>(xr[c + j]);
    for (std::size_t j = 0; c < n; ++c, ++j)
      part[j] += static_cast<double>(xr[c]) * static_cast<double>(xr[c]);
    const double ss = ((part[0] + part[4]) + (part[2] + part[6])) +
                      ((part[1] + part[5]) + (part[3] + part[7]));
    const auto var = static_cast<float>(ss / static_cast<double>(n));
    const float inv = 1.0f / std::sqrt(var + eps);
    float* o = out + r * n;
    for (std::size_t i = 0; i < n; ++i) o[i] = (xr[i] * inv) * weight[i];
  }
}

/// g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n, vectorised with xsimd's
/// exp (within a few ulp of std::exp; the scalar tail uses std::exp).
inline void silu_mul(float* EDGELLM_RESTRICT g, const float* EDGELLM_RESTRICT u,
                     std::size_t n) noexcept {
  using batch = xsimd::batch<float>;
  std::size_t i = 0;
  for (; i + batch::size <= n; i += batch::size) {
    const batch x = batch::load_unaligned(g + i);
    (x / (batch(1.0f) + xsimd::exp(-x)) * batch::load_unaligned(u + i)).store_unaligned(g + i);
  }
  for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

/// The RoPE tables of `rows` consecutive positions first_pos, first_pos + 1, ...:
/// cos[t][i] = cos(angle), sin[t][i] = sin(angle), angle = float(first_pos + t) * inv_freq[i],
/// a single fp32 product as in HF. inv_freq: [half]; cos, sin: [rows][half].
inline void rope_tables(const float* inv_freq, std::size_t half, std::size_t first_pos,
                        std::size_t rows, float* cos, float* sin) noexcept {
  for (std::size_t t = 0; t < rows; ++t) {
    const auto pos = static_cast<float>(first_pos + t);
    for (std::size_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos[t * half + i] = std::cos(angle);
      sin[t * half + i] = std::sin(angle);
    }
  }
}

/// RoPE (rotate_half: pairs (i, i + head_dim / 2)) in place on `heads` heads of each of `rows`
/// rows of v ([rows][heads][head_dim]), with the tables of rope_tables() ([rows][head_dim / 2]):
///   v[i] = a cos - b sin,  v[i + half] = b cos + a sin   (a = v[i], b = v[i + half]).
inline void rope(float* v, std::size_t rows, std::size_t heads, std::size_t head_dim,
                 const float* cos, const float* sin) noexcept {
  const std::size_t half = head_dim / 2;
  for (std::size_t t = 0; t < rows; ++t) {
    const float* cs = cos + t * half;
    const float* sn = sin + t * half;
    for (std::size_t h = 0; h < heads; ++h) {
      float* p = v + (t * heads + h) * head_dim;
      for (std::size_t i = 0; i < half; ++i) {
        const float a = p[i], b = p[i + half];
        p[i] = a * cs[i] - b * sn[i];
        p[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

/// x[i] += y[i] for i < n (the residual add).
inline void add(float* EDGELLM_RESTRICT x, const float* EDGELLM_RESTRICT y, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
