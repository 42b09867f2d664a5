// SPDX-License-Identifier: Apache-2.0
// The int8 KV cache: keys and values stored as int8 codes with one fp32 scale per (position,
// kv head), attention computed directly on the codes; and KvType, the choice of KV storage.
#pragma once

#include "edgellm/cache/dense_kv_cache.hpp"
#include "edgellm/cache/kv_cache.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

namespace edgellm::cache {

namespace detail {

/// int8 storage, symmetric absmax per row (one position of one kv head, head_dim values):
///   scale = amax / 127 (fp32),  code_c = nearbyint(x_c * (127 / amax)) in [-127, 127]
/// (127 / amax in fp32, ties to even), so the stored value code_c * scale is within
/// scale / 2 (plus fp32 rounding) of x_c. An all-zero row has scale 0. A row holding inf or NaN
/// gets scale NaN and zero codes: attention over it yields NaN, as fp32 arithmetic would.
///
/// Why this format (measured with numpy on N(0, 1) keys/values, head_dim 128): a zero point
/// gains nothing on data symmetric about 0 (keys and values after RoPE are); groups of 32
/// along head_dim cut the attention error only by ~20% (the absmax of 32 normal values is
/// ~2.1 sigma against ~2.6 for 128) at 4x the scales, and no longer fit the 0.53 x fp16 budget
/// with fp32 scales (144 / 256 bytes per row). An fp16 scale would save 2 bytes per row
/// (130 vs 132 / 256 bytes, 1.5% of the traffic) for a 2^-11 relative rounding of every value;
/// fp32 keeps the scale exact and the loads aligned.
struct StoreQ8 {
  using element = std::int8_t;
  static constexpr bool scaled = true;
  static constexpr std::string_view name = "KVCacheQ8";
  /// Quantises n values into out; returns the row's scale.
  static float store(const float* in, element* out, std::size_t n) noexcept {
    float amax = 0.0f;
    bool finite = true;
    for (std::size_t i = 0; i < n; ++i) {
      const float a = std::fabs(in[i]);
      finite = finite && a <= std::numeric_limits<float>::max();
      amax = std::max(amax, a);
    }
    if (!finite || amax == 0.0f) {
      for (std::size_t i = 0; i < n; ++i) out[i] = 0;
      return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    }
    const float inv = 127.0f / amax;
    for (std::size_t i = 0; i < n; ++i) {
      const float q = std::nearbyint(in[i] * inv);
      out[i] = static_cast<element>(std::clamp(q, -127.0f, 127.0f));
    }
    return amax / 127.0f;
  }
};

}  // namespace detail

/// A KV cache over a storage format: detail::StoreQ8 (int8 codes + fp32 scales, the default),
/// or detail::StoreF16 / detail::StoreF32 for reference; all three are DenseKVCache (same
/// layout, attention kernel, truncation, prefix blobs), differing only in what a stored row is.
template <class Store = detail::StoreQ8>
using QuantizedKVCache = DenseKVCache<Store>;

/// int8 keys and values with one fp32 scale per (position, kv head): (head_dim + 4) / (2
/// head_dim) of the fp16 cache's bytes (0.516 at head_dim 128). Attention runs on the codes:
/// scores dot(q, k_codes) * key scale, weights exp(s - m) * value scale times the value codes
/// (DenseKVCache's class comment has the math and the error bound against the dequantised
/// values; the quantisation error itself is at most half a step, amax / 254, per value).
using KVCacheQ8 = QuantizedKVCache<detail::StoreQ8>;

static_assert(PrefixKVCache<KVCacheQ8>);

/// The KV storage a session uses: a run-time choice for command lines and configs.
enum class KvType {
  f32,   ///< KVCacheF32
  f16,   ///< KVCacheF16
  int8,  ///< KVCacheQ8
};

/// "f32", "f16", "int8".
inline const char* kv_type_name(KvType t) noexcept {
  switch (t) {
    case KvType::f32: return "f32";
    case KvType::f16: return "f16";
    case KvType::int8: return "int8";
  }
  return "?";
}

/// Parses "int8" (or "q8"), "f16" (or "fp16"), "f32" (or "fp32").
inline result<KvType> parse_kv_type(std::string_view s) {
  if (s == "int8" || s == "q8") return KvType::int8;
  if (s == "f16" || s == "fp16") return KvType::f16;
  if (s == "f32" || s == "fp32") return KvType::f32;
  return make_error(errc::invalid_argument, "parse_kv_type",
                    "kv type '" + std::string(s) + "': expected int8, f16 or f32");
}

/// Calls fn(std::type_identity<Cache>{}) with the cache type of t, e.g.
///   with_kv_type(t, [&](auto tag) { using Cache = typename decltype(tag)::type; ... });
template <class Fn>
decltype(auto) with_kv_type(KvType t, Fn&& fn) {
  switch (t) {
    case KvType::f32: return fn(std::type_identity<KVCacheF32>{});
    case KvType::f16: return fn(std::type_identity<KVCacheF16>{});
    case KvType::int8: break;
  }
  return fn(std::type_identity<KVCacheQ8>{});
}

}  // namespace edgellm::cache
