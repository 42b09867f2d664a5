// SPDX-License-Identifier: Apache-2.0
// The scalar oracle of causal GQA attention, in double precision, that the caches' attention
// kernels are tested against.
#pragma once

#include "edgellm/cache/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace edgellm::cache {

namespace reference {

/// Scalar oracle for causal GQA attention, in double precision.
///   q   [n_q][heads][head_dim]          queries (after RoPE)
///   k,v [kv_heads][length][head_dim]    all cached keys / values (after RoPE), length >=
///                                        first_pos + n_q
///   out [n_q][heads][head_dim]
/// Query i (position p = first_pos + i), head h, uses kv head h / (heads / kv_heads):
///   s_j = (q . k_j) * head_dim^-0.5 for j <= p;  out = sum_j softmax(s)_j * v_j.
inline void attention(const float* q, std::size_t n_q, std::size_t first_pos, std::size_t heads,
                      std::size_t kv_heads, std::size_t head_dim, std::size_t length,
                      const float* k, const float* v, float* out) {
  const std::size_t group = heads / kv_heads;
  const double scale = static_cast<double>(attention_scale(head_dim));
  std::vector<double> s, acc(head_dim);
  for (std::size_t i = 0; i < n_q; ++i) {
    const std::size_t pos = first_pos + i;
    for (std::size_t h = 0; h < heads; ++h) {
      const float* qh = q + (i * heads + h) * head_dim;
      const float* kh = k + (h / group) * length * head_dim;
      const float* vh = v + (h / group) * length * head_dim;
      s.assign(pos + 1, 0.0);
      double mx = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j <= pos; ++j) {
        double d = 0.0;
        for (std::size_t c = 0; c < head_dim; ++c)
          d += static_cast<double>(qh[c]) * static_cast<double>(kh[j * head_dim + c]);
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0.0;
      for (std::size_t j = 0; j <= pos; ++j) sum += (s[j] = std::exp(s[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::size_t j = 0; j <= pos; ++j)
        for (std::size_t c = 0; c < head_dim; ++c)
          acc[c] += s[j] / sum * static_cast<double>(vh[j * head_dim + c]);
      for (std::size_t c = 0; c < head_dim; ++c)
        out[(i * heads + h) * head_dim + c] = static_cast<float>(acc[c]);
    }
  }
}

}  // namespace reference

}  // namespace edgellm::cache
