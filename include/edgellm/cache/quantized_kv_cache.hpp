// SPDX-License-Identifier: Apache-2.0
// The quantised KV caches: int8 codes with one fp32 scale per (position, kv head), and int4 codes
// with one fp16 scale per (position, kv head, group of 32 coordinates), attention computed
// directly on the codes; and KvType, the choice of KV storage.
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

/// The largest |x_i| of n values; `finite` says whether every one is finite (inf and NaN are
/// not).
inline float absmax(const float* x, std::size_t n, bool& finite) noexcept {
  float amax = 0.0f;
  finite = true;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= std::numeric_limits<float>::max();
    amax = std::max(amax, a);
  }
  return amax;
}

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
struct StoreQ8 : PlainStore<std::int8_t> {
  static constexpr bool scaled = true;
  static constexpr std::size_t groups(std::size_t) noexcept { return 1; }
  static constexpr std::string_view name = "KVCacheQ8";
  /// Quantises n values into out and the row's scale into scale[0].
  static void store(const float* in, element* out, std::size_t n, scale_type* scale) noexcept {
    *scale = row_scale(in, out, n);
  }
  /// Quantises n values into out; returns the row's scale.
  static float row_scale(const float* in, element* out, std::size_t n) noexcept {
    bool finite = true;
    const float amax = absmax(in, n, finite);
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

/// int4 storage (kernels::KvLayerViewQ4 has the layout): symmetric absmax per group of
/// kKvQ4Group = 32 coordinates of one position of one kv head,
///   scale = fp16(amax / 7),  code_c = clamp(nearbyint(x_c / scale), -7, 7)
/// (the fp16 scale's own value divides, so the stored value code_c * scale is within scale / 2
/// of x_c, plus what the clamp takes when fp16 rounded the scale down: at most amax 2^-11). An
/// all-zero group, or one whose scale rounds to 0 in fp16, has scale 0; a group holding inf or
/// NaN, or whose amax / 7 exceeds fp16's range, gets scale NaN and zero codes (attention over
/// it yields NaN, as for int8).
///
/// Why this format: the bytes. A row of head_dim 128 is 64 bytes of codes; a budget of 0.3 x
/// fp16 (76.8 bytes) leaves room for 4 fp16 scales: groups of 32 with fp16 scales (72 bytes,
/// 0.28 x) fit, fp32 scales per 32 (80) or an fp16 zero point per 32 (80) do not, and groups of
/// 64 or 128 fit but let one outlier coordinate coarsen 2-4x more values. Keys after RoPE and
/// values are close to symmetric about 0 per row, so no zero point.
struct StoreQ4 {
  using element = std::uint8_t;
  using scale_type = std::uint16_t;  // fp16 bits
  using view_type = kernels::KvLayerViewQ4;
  static constexpr std::size_t values_per_element = 2;
  static constexpr std::size_t head_dim_multiple = kernels::kKvQ4Group;
  static constexpr bool scaled = true;
  static constexpr std::size_t groups(std::size_t head_dim) noexcept {
    return head_dim / kernels::kKvQ4Group;
  }
  static constexpr std::string_view name = "KVCacheQ4";

  /// Quantises n values (a multiple of 32) into n / 2 bytes packed as a value row of
  /// KvLayerViewQ4 (16 values per 8-byte block) and n / 32 scales.
  static void store(const float* in, element* out, std::size_t n, scale_type* scales) noexcept {
    constexpr std::size_t G = kernels::kKvQ4Group;
    for (std::size_t g = 0; g * G < n; ++g) {
      const float* x = in + g * G;
      element* o = out + g * G / 2;
      bool finite = true;
      const float step = absmax(x, G, finite) / 7.0f;
      finite = finite && step <= 65504.0f;
      const std::uint16_t s16 = kernels::f32_to_f16(finite ? step : std::numeric_limits<float>::quiet_NaN());
      const float s = kernels::f16_to_f32(s16);
      scales[g] = !finite || s > 0.0f ? s16 : std::uint16_t{0};
      for (std::size_t i = 0; i < G / 2; ++i) o[i] = 0;  // codes 0
      if (!finite || !(s > 0.0f)) continue;
      const float inv = 1.0f / s;
      for (std::size_t i = 0; i < G; ++i) {
        const auto q = static_cast<int>(std::clamp(std::nearbyint(x[i] * inv), -7.0f, 7.0f));
        kernels::KvLayerViewQ4::set_code(o + i / 16 * 8, i % 16, q);
      }
    }
  }

  /// A packed row -> column `lane` of a key tile [head_dim][8 bytes] (value `lane` of column
  /// c's block), replacing what the column held there.
  static void put_key(element* tile, std::size_t lane, const element* row, std::size_t hd) noexcept {
    using V = kernels::KvLayerViewQ4;
    for (std::size_t c = 0; c < hd; ++c) V::set_code(tile + c * 8, lane, V::code(row + c / 16 * 8, c % 16));
  }
  static void get_key(const element* tile, std::size_t lane, element* row, std::size_t hd) noexcept {
    using V = kernels::KvLayerViewQ4;
    for (std::size_t c = 0; c < hd; ++c) V::set_code(row + c / 16 * 8, c % 16, V::code(tile + c * 8, lane));
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

/// int4 keys and values with one fp16 scale per (position, kv head, 32 coordinates): (head_dim /
/// 2 + head_dim / 16) / (2 head_dim) = 0.28 of the fp16 cache's bytes. head_dim must be a
/// multiple of 32. Attention runs on the codes (kernels::KvLayerViewQ4): each loaded code is
/// multiplied by its group's scale (exact in fp32) before the same FMA sums as int8's.
using KVCacheQ4 = QuantizedKVCache<detail::StoreQ4>;

static_assert(PrefixKVCache<KVCacheQ8>);
static_assert(PrefixKVCache<KVCacheQ4>);

/// The KV storage a session uses: a run-time choice for command lines and configs.
enum class KvType {
  f32,   ///< KVCacheF32
  f16,   ///< KVCacheF16
  int8,  ///< KVCacheQ8
  int4,  ///< KVCacheQ4
};

/// "f32", "f16", "int8".
inline const char* kv_type_name(KvType t) noexcept {
  switch (t) {
    case KvType::f32: return "f32";
    case KvType::f16: return "f16";
    case KvType::int8: return "int8";
    case KvType::int4: return "int4";
  }
  return "?";
}

/// Parses "int8" (or "q8"), "int4" (or "q4"), "f16" (or "fp16"), "f32" (or "fp32").
inline result<KvType> parse_kv_type(std::string_view s) {
  if (s == "int8" || s == "q8") return KvType::int8;
  if (s == "int4" || s == "q4") return KvType::int4;
  if (s == "f16" || s == "fp16") return KvType::f16;
  if (s == "f32" || s == "fp32") return KvType::f32;
  return make_error(errc::invalid_argument, "parse_kv_type",
                    "kv type '" + std::string(s) + "': expected int8, int4, f16 or f32");
}

/// Calls fn(std::type_identity<Cache>{}) with the cache type of t, e.g.
///   with_kv_type(t, [&](auto tag) { using Cache = typename decltype(tag)::type; ... });
template <class Fn>
decltype(auto) with_kv_type(KvType t, Fn&& fn) {
  switch (t) {
    case KvType::f32: return fn(std::type_identity<KVCacheF32>{});
    case KvType::f16: return fn(std::type_identity<KVCacheF16>{});
    case KvType::int4: return fn(std::type_identity<KVCacheQ4>{});
    case KvType::int8: break;
  }
  return fn(std::type_identity<KVCacheQ8>{});
}

}  // namespace edgellm::cache
