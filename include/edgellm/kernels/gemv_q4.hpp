// SPDX-License-Identifier: Apache-2.0
// Exact-path int4 GEMV (decode, y = W x): dequantise and FMA in fp32, written once with xsimd.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <xsimd/xsimd.hpp>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "edgellm/config.hpp"
#include "edgellm/detail/cpu_features.hpp"
#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

namespace detail {

#if EDGELLM_X86_MICROKERNELS
/// F16C/AVX2 conversion of a tile header; compiled for those instructions by attribute (not by
/// the host's flags, so it is the same function in every TU) and called only after CPUID said so.
__attribute__((target("avx2,f16c"))) inline void tile_header_to_f32_f16c(
    const std::uint16_t* scale, const std::uint8_t* zero, float zero_bias, float* sf,
    float* zf) noexcept {
  const __m256 bias = _mm256_set1_ps(zero_bias);
  for (int h = 0; h < 2; ++h) {
    _mm256_store_ps(sf + 8 * h, _mm256_cvtph_ps(_mm_loadu_si128(
                                    reinterpret_cast<const __m128i*>(scale + 8 * h))));
    const __m128i z8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(zero + 8 * h));
    _mm256_store_ps(zf + 8 * h, _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(z8)), bias));
  }
}
#endif

/// The 16 fp16 scales and zero points of a tile header as fp32: sf[r] = scale[r],
/// zf[r] = zero[r] + zero_bias (exact). Vector conversion where the CPU has it (F16C, or
/// AArch64's FCVTL), else the portable scalar converter; same values either way.
inline void tile_header_to_f32(const std::uint16_t* scale, const std::uint8_t* zero,
                               float zero_bias, float* sf, float* zf) noexcept {
#if EDGELLM_X86_MICROKERNELS
  if (edgellm::detail::cpu_features().avx2) {
    tile_header_to_f32_f16c(scale, zero, zero_bias, sf, zf);
    return;
  }
#elif defined(__aarch64__)
  for (int b = 0; b < 4; ++b)
    vst1q_f32(sf + 4 * b, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(scale + 4 * b))));
#endif
  for (std::size_t r = 0; r < 16; ++r) {
#if !defined(__aarch64__) || EDGELLM_X86_MICROKERNELS
    sf[r] = f16_to_f32(scale[r]);
#endif
    zf[r] = zero_bias + static_cast<float>(zero[r]);
  }
}

}  // namespace detail

/// Tiles the exact GEMV prefetches ahead of the one it reads (into L2). The tiles of a tile row
/// lie back to back, so this runs along the thread's stream. It raised the streaming rate on
/// one host and made no difference on another (docs/performance.md, Kernels).
inline constexpr std::size_t kExactPrefetchTiles = 3;

/// Numerics of the exact path. Per group g of G inputs and per row r it forms
///     a_g = sum_{k in g} (q[r][k] - z[r][g]) * x[k]        in fp32 ((q - z) is exact)
/// and y[r] = bias[r] + sum_g s[r][g] * a_g in fp32, groups in order. With u = 2^-24, the
/// standard summation bound gives |y - y_exact| <= (G + n_groups + 2) * u * sum_k |w[r][k] x[k]|
/// (G/8 + n_groups + 3 with the 8 interleaved accumulators used here; the tests check the
/// looser form). The result is independent of the thread count and of how rows are split.
/// NaN or Inf in x propagates to every output (IEEE arithmetic, no special-casing).
///
/// gemv_f32_qa4g<G>_exact<Arch>: rows of tiles [t_begin, t_end); y receives rows
/// [16 t_begin, min(16 t_end, n)). x: [k] fp32, any alignment. bias: [n] or null.
template <class Arch, std::size_t G>
void gemv_q4_exact_tiles(const Q4Matrix& w, const float* EDGELLM_RESTRICT x,
                         const float* EDGELLM_RESTRICT bias, float* EDGELLM_RESTRICT y,
                         std::size_t t_begin, std::size_t t_end) noexcept {
  using fbatch = xsimd::batch<float, Arch>;
  using ibatch = xsimd::batch<std::int32_t, Arch>;
  constexpr std::size_t W = fbatch::size;          // lanes = rows per batch
  static_assert(16 % W == 0, "a tile's 16 rows must split into whole batches");
  constexpr std::size_t NB = 16 / W;                // batches per tile
  constexpr std::size_t NACC = NB >= 8 ? 1 : 8 / NB;  // interleaved accumulators per batch
  const std::size_t ng = w.n_groups(), n = w.n();
  // Code h (0..7) of a row's 32-bit word, k = 8 kb + h, is the nibble at bit 8 (h % 4) + 4 (h / 4).
  // It is read in place from v (h % 4 < 2) or v >> 16, at bit position s = 8 (h % 2) + 4 (h / 4)
  // of that word (0, 4, 8 or 12): OR-ing the masked nibble q 2^s into the mantissa of
  // 2^(23 - s) gives the float 2^(23 - s) + q exactly (its ulp is 2^-s), and subtracting
  // 2^(23 - s) + z (exact) gives q - z. One shift per word instead of one per code.
  const ibatch magic[4] = {ibatch(150 << 23), ibatch(146 << 23), ibatch(142 << 23),
                           ibatch(138 << 23)};  // bits of 2^23, 2^19, 2^15, 2^11
  const ibatch mask[4] = {ibatch(0xF), ibatch(0xF0), ibatch(0xF00), ibatch(0xF000)};

  for (std::size_t t = t_begin; t < t_end; ++t) {
    fbatch yacc[NB];
    for (std::size_t b = 0; b < NB; ++b) yacc[b] = fbatch(0.0f);
    for (std::size_t g = 0; g < ng; ++g) {
      const Q4Tile<G>* tile = w.tile<G>(t, g);
      prefetch_tile_ahead<2>(tile, kExactPrefetchTiles);  // into L2
      alignas(64) float zf[16], sf[16];
      detail::tile_header_to_f32(tile->scale, tile->zero, 0.0f, sf, zf);
      fbatch zb[NB][4], acc[NB][NACC];  // zb[b][s / 4] = 2^(23 - s) + z
      for (std::size_t b = 0; b < NB; ++b) {
        const fbatch z = fbatch::load_aligned(zf + b * W);
        for (std::size_t j = 0; j < 4; ++j) zb[b][j] = z + xsimd::bitwise_cast<fbatch>(magic[j]);
        for (std::size_t a = 0; a < NACC; ++a) acc[b][a] = fbatch(0.0f);
      }
      const float* xg = x + g * G;
      for (std::size_t kb = 0; kb < G / 8; ++kb) {
        const auto* words = reinterpret_cast<const std::int32_t*>(tile->codes[kb]);
        for (std::size_t b = 0; b < NB; ++b) {
          const ibatch v = ibatch::load_aligned(words + b * W);
          const ibatch v16 = v >> 16;
          for (std::size_t h = 0; h < 8; ++h) {
            const std::size_t j = 2 * (h % 2) + h / 4;  // s / 4
            const ibatch bits = ((h % 4 < 2 ? v : v16) & mask[j]) | magic[j];
            const fbatch q = xsimd::bitwise_cast<fbatch>(bits);  // 2^(23 - s) + q
            acc[b][h % NACC] = xsimd::fma(q - zb[b][j], fbatch(xg[8 * kb + h]), acc[b][h % NACC]);
          }
        }
      }
      for (std::size_t b = 0; b < NB; ++b) {
        fbatch s = acc[b][0];
        for (std::size_t a = 1; a < NACC; ++a) s += acc[b][a];
        yacc[b] = xsimd::fma(s, fbatch::load_aligned(sf + b * W), yacc[b]);
      }
    }
    const std::size_t row0 = t * 16;
    alignas(64) float out[16];
    for (std::size_t b = 0; b < NB; ++b) yacc[b].store_aligned(out + b * W);
    const std::size_t rows = n - row0 < 16 ? n - row0 : 16;
    for (std::size_t r = 0; r < rows; ++r) y[row0 + r] = out[r] + (bias ? bias[row0 + r] : 0.0f);
  }
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
