// SPDX-License-Identifier: Apache-2.0
// Per-group int8 quantisation of fp32 activations for the integer (W4A8) fast path.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "edgellm/config.hpp"
#include "edgellm/detail/diagnostics.hpp"

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

/// Quantised activations of m rows of k inputs, grouped like the weights (G inputs a group):
///   q[m][k]        int8, q = round_half_even(x * (127 / amax)), in [-127, 127]
///   scale[m][ng]   fp32 step dx = amax / 127 (amax = max |x| over the group; 0 for a zero group)
///   sum[m][ng]     int32 sum of q over the group (folds the weights' zero points in)
/// so that x ~= dx * q with |x - dx * q| <= dx / 2. A group holding NaN or Inf gets scale NaN
/// and q = 0, which makes every output of the fast path that reads it NaN.
/// All pointers are caller-owned (see Workspace); ldq = k, lds = ng.
struct Q8ActivationsView {
  std::int8_t* q = nullptr;
  float* scale = nullptr;
  std::int32_t* sum = nullptr;
  std::size_t m = 0, k = 0, group_size = 0;
  std::size_t n_groups() const noexcept { return k / group_size; }
};

/// Bytes a Q8ActivationsView of m x k with group size G needs (q, then scales, then sums;
/// each part 64-byte aligned).
inline std::size_t q8_activation_bytes(std::size_t m, std::size_t k, std::size_t G) noexcept {
  auto up = [](std::size_t b) { return (b + 63) / 64 * 64; };
  return up(m * k) + up(m * (k / G) * 4) * 2;
}

/// Lays a Q8ActivationsView over `buffer` (64-byte aligned, q8_activation_bytes() long).
inline Q8ActivationsView make_q8_view(std::byte* buffer, std::size_t m, std::size_t k,
                                      std::size_t G) noexcept {
  auto up = [](std::size_t b) { return (b + 63) / 64 * 64; };
  Q8ActivationsView v;
  v.m = m;
  v.k = k;
  v.group_size = G;
  v.q = reinterpret_cast<std::int8_t*>(buffer);
  v.scale = reinterpret_cast<float*>(buffer + up(m * k));
  v.sum = reinterpret_cast<std::int32_t*>(buffer + up(m * k) + up(m * (k / G) * 4));
  return v;
}

/// Quantises rows [i_begin, i_end) of X [m][ldx] into out (xsimd; equal bit for bit to
/// reference::quantize_activations_q8: max and round-half-even are exact operations).
template <class Arch>
void quantize_activations_q8(const float* EDGELLM_RESTRICT x, std::size_t ldx,
                             const Q8ActivationsView& out, std::size_t i_begin,
                             std::size_t i_end) noexcept {
  using fbatch = xsimd::batch<float, Arch>;
  using ibatch = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t W = fbatch::size;
  const std::size_t G = out.group_size, ng = out.n_groups(), k = out.k;
  const fbatch big(std::numeric_limits<float>::max());
  for (std::size_t i = i_begin; i < i_end; ++i) {
    const float* xr = x + i * ldx;
    for (std::size_t g = 0; g < ng; ++g) {
      const float* xg = xr + g * G;
      fbatch amax_v(0.0f);
      bool finite = true;
      for (std::size_t c = 0; c < G; c += W) {
        const fbatch a = xsimd::abs(fbatch::load_unaligned(xg + c));
        finite = finite && xsimd::all(a <= big);  // false for NaN and Inf
        amax_v = xsimd::max(amax_v, a);
      }
      std::int8_t* qg = out.q + i * k + g * G;
      if (!finite) {
        for (std::size_t c = 0; c < G; ++c) qg[c] = 0;
        out.scale[i * ng + g] = std::numeric_limits<float>::quiet_NaN();
        out.sum[i * ng + g] = 0;
        continue;
      }
      alignas(64) float lanes[W];
      amax_v.store_aligned(lanes);
      float amax = 0.0f;
      for (std::size_t l = 0; l < W; ++l) amax = lanes[l] > amax ? lanes[l] : amax;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const fbatch inv_v(inv);
      ibatch sum_v(0);
      alignas(64) std::int32_t tmp[W];
      for (std::size_t c = 0; c < G; c += W) {
        const ibatch qi = xsimd::nearbyint_as_int(fbatch::load_unaligned(xg + c) * inv_v);
        sum_v += qi;
        qi.store_aligned(tmp);
        for (std::size_t l = 0; l < W; ++l) qg[c + l] = static_cast<std::int8_t>(tmp[l]);
      }
      out.scale[i * ng + g] = amax / 127.0f;
      out.sum[i * ng + g] = xsimd::hadd(sum_v);
    }
  }
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
