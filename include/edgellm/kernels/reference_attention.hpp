// SPDX-License-Identifier: Apache-2.0
// The scalar attention references, in double precision: reference::attention, the oracle of
// causal GQA attention on fp32 keys and values, and reference::attention_stored, the twin of
// kernels/attention.hpp's attend_layer on a layer's stored codes and scales. The SIMD kernels,
// the caches and the Vulkan attention are tested against them; the scalar backend runs the twin.
#pragma once

#include "edgellm/kernels/attention.hpp"
#include "edgellm/kernels/float16.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace edgellm::kernels::reference {

/// A stored element as a number (exact).
inline double element_value(float x) noexcept { return x; }
inline double element_value(std::int8_t x) noexcept { return x; }
inline double element_value(std::uint16_t x) noexcept { return f16_to_f32(x); }

/// The stored key / value (position j, coordinate c) of kv head g, dequantised (exact in double).
template <class T>
double stored_key(const KvLayerView<T>& kv, std::size_t g, std::size_t j, std::size_t c) noexcept {
  const double x = element_value(kv.k_head(g)[KvLayerView<T>::k_index(j, c, kv.head_dim)]);
  return kv.k_scale ? x * static_cast<double>(kv.k_scale_head(g)[j]) : x;
}
template <class T>
double stored_value(const KvLayerView<T>& kv, std::size_t g, std::size_t j,
                    std::size_t c) noexcept {
  const double x = element_value(kv.v_head(g)[j * kv.head_dim + c]);
  return kv.v_scale ? x * static_cast<double>(kv.v_scale_head(g)[j]) : x;
}

/// The same for an int4 layer: code * fp16 scale of the coordinate's group.
inline double stored_key(const KvLayerViewQ4& kv, std::size_t g, std::size_t j,
                         std::size_t c) noexcept {
  return kv.key_code(g, j, c) * static_cast<double>(f16_to_f32(kv.key_scale(g, j, c)));
}
inline double stored_value(const KvLayerViewQ4& kv, std::size_t g, std::size_t j,
                           std::size_t c) noexcept {
  return kv.value_code(g, j, c) * static_cast<double>(f16_to_f32(kv.value_scale(g, j, c)));
}

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

/// Double-precision twin of attend_layer on the stored data: the same chunks of
/// kAttentionChunk positions with their own max and sum, merged in order, in plain loops over
/// the stored codes and scales (values dequantised exactly). Agrees with
/// reference::attention on the dequantised keys and values to double rounding; the xsimd path
/// agrees with it within the bound stated on DenseKVCache.
///   q, out: [n_q][heads][head_dim];  kv: a KvLayerView<T> or a KvLayerViewQ4
template <class View>
void attention_stored(const View& kv, const float* q, std::size_t n_q,
                      std::size_t first_pos, std::size_t heads, float* out) {
  const std::size_t hd = kv.head_dim, group = heads / kv.kv_heads;
  const double scale = static_cast<double>(attention_scale(hd));
  std::vector<double> m, l, o, s(kAttentionChunk);
  for (std::size_t i = 0; i < n_q; ++i) {
    const std::size_t pos = first_pos + i, nb = kernels::detail::chunks_of(pos);
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t g = h / group;
      const float* qh = q + (i * heads + h) * hd;
      m.assign(nb, 0.0);
      l.assign(nb, 0.0);
      o.assign(nb * hd, 0.0);
      for (std::size_t b = 0; b < nb; ++b) {
        const std::size_t j0 = b * kAttentionChunk, n = std::min(kAttentionChunk, pos + 1 - j0);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < n; ++j) {
          double d = 0.0;
          for (std::size_t c = 0; c < hd; ++c)
            d += static_cast<double>(qh[c]) * stored_key(kv, g, j0 + j, c);
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        m[b] = mx;
        for (std::size_t j = 0; j < n; ++j) {
          const double e = std::exp(s[j] - mx);
          l[b] += e;
          for (std::size_t c = 0; c < hd; ++c) o[b * hd + c] += e * stored_value(kv, g, j0 + j, c);
        }
      }
      const double mx = *std::max_element(m.begin(), m.end());
      double lt = 0.0;
      for (std::size_t b = 0; b < nb; ++b) lt += std::exp(m[b] - mx) * l[b];
      for (std::size_t c = 0; c < hd; ++c) {
        double acc = 0.0;
        for (std::size_t b = 0; b < nb; ++b) acc += std::exp(m[b] - mx) * o[b * hd + c];
        out[(i * heads + h) * hd + c] = static_cast<float>(acc / lt);
      }
    }
  }
}

}  // namespace edgellm::kernels::reference
