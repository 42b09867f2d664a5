// SPDX-License-Identifier: Apache-2.0
// x86 microkernels for the W4A8 fast path: AVX-512 VNNI, AVX-VNNI (256-bit) and AVX2 (maddubs).
// Compiled with per-function target attributes, so the host needs no -m flags; the dispatcher
// calls one only after CPUID said the CPU has it (detail/cpu_features.hpp).
#pragma once

#include "edgellm/config.hpp"

#if EDGELLM_X86_MICROKERNELS

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/kernels/formats.hpp"

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels::arch {

namespace detail {
inline std::int32_t load_x4(const std::int8_t* p) noexcept {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/// Tiles to prefetch ahead of the one an MR-row call is reading. With one row per call a tile
/// is consumed faster than DRAM delivers it and the hardware prefetcher alone keeps enough
/// misses in flight a few tiles ahead; with more rows each tile takes MR times the arithmetic,
/// and without a software prefetch far enough ahead the loads and the arithmetic stop
/// overlapping when the weights stream from DRAM (docs/performance.md, Kernels).
template <std::size_t MR>
inline constexpr std::size_t kPrefetchTiles = MR == 1 ? 3 : 8;

/// Cache level of that prefetch. MR = 1 (GEMV) prefetches into L2 only: an L1 prefetch holds
/// one of the core's few L1 miss buffers per line until DRAM answers, which the demand loads
/// then wait for; a farther distance or a non-temporal hint was slower (docs/performance.md,
/// Kernels). AMD cores treat T0/T1/T2 alike. MR > 1 spends long enough per tile that the L1
/// prefetch pays.
/// (The value is __builtin_prefetch's locality: 3 = T0, 2 = T1.)
template <std::size_t MR>
inline constexpr int kPrefetchLocality = MR == 1 ? 2 : 3;

/// Prefetches the tile kPrefetchTiles<MR> after `tl`: decode and verification stream W from
/// DRAM once.
template <std::size_t MR, std::size_t G>
inline void prefetch_ahead(const Q4Tile<G>* tl) noexcept {
  prefetch_tile_ahead<kPrefetchLocality<MR>>(tl, kPrefetchTiles<MR>);
}
}  // namespace detail

/// gemm_f32_qa8g<G>_qa4g<G>p16x8_<MR>x16_avx512vnni. One zmm = the 16 rows of a tile; per
/// 64-byte code block, `& 0x0F` and `>> 4 & 0x0F` give lanes of four u8 codes per row, and
/// vpdpbusd with four broadcast int8 activations adds 4 products per row. Each row has its own
/// accumulators for the low and the high nibbles (four for MR = 1), so at least 4 independent
/// vpdpbusd chains hide its latency; the code-block loop is unrolled so the broadcasts, masks
/// and dot products of neighbouring blocks interleave. Register use at MR = 8: 16 int32 + 8 fp32
/// accumulators + 3 code registers + broadcasts.
struct Q4FastMicroAvx512Vnni {
  static constexpr std::size_t mr = 8;
  static constexpr const char* name = "avx512_vnni";

  template <std::size_t G, std::size_t MR>
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))) static void run(
      const Q4Tile<G>* tiles, std::size_t ng, const std::int8_t* xq, std::size_t ldq,
      const float* dx, const std::int32_t* xs, std::size_t lds, float* out) noexcept {
    constexpr std::size_t NA = MR == 1 ? 4 : 2;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 yacc[MR];
    for (std::size_t i = 0; i < MR; ++i) yacc[i] = _mm512_load_ps(out + 16 * i);
    for (std::size_t g = 0; g < ng; ++g) {
      const Q4Tile<G>* tl = tiles + g;
      detail::prefetch_ahead<MR>(tl);
      __m512i acc[MR][NA];
      for (std::size_t i = 0; i < MR; ++i)
        for (std::size_t a = 0; a < NA; ++a) acc[i][a] = _mm512_setzero_si512();
      const std::int8_t* xg = xq + g * G;
#pragma GCC unroll 16
      for (std::size_t kb = 0; kb < G / 8; ++kb) {
        const __m512i c = _mm512_load_si512(tl->codes[kb]);
        const __m512i lo = _mm512_and_si512(c, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
#pragma GCC unroll 8
        for (std::size_t i = 0; i < MR; ++i) {
          const std::int8_t* xp = xg + i * ldq + 8 * kb;
          const std::size_t a0 = (2 * kb) % NA, a1 = (2 * kb + 1) % NA;
          acc[i][a0] = _mm512_dpbusd_epi32(acc[i][a0], lo, _mm512_set1_epi32(detail::load_x4(xp)));
          acc[i][a1] =
              _mm512_dpbusd_epi32(acc[i][a1], hi, _mm512_set1_epi32(detail::load_x4(xp + 4)));
        }
      }
      const __m512 zf = _mm512_cvtepi32_ps(
          _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(tl->zero))));
      const __m512 sf =
          _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(tl->scale)));
      for (std::size_t i = 0; i < MR; ++i) {
        __m512i isum = acc[i][0];
        for (std::size_t a = 1; a < NA; ++a) isum = _mm512_add_epi32(isum, acc[i][a]);
        // t = dot - z * xsum: an integer below 2^24 in magnitude, so exact in fp32.
        const __m512 t = _mm512_fnmadd_ps(zf, _mm512_set1_ps(static_cast<float>(xs[i * lds + g])),
                                          _mm512_cvtepi32_ps(isum));
        yacc[i] = _mm512_fmadd_ps(t, _mm512_mul_ps(sf, _mm512_set1_ps(dx[i * lds + g])), yacc[i]);
      }
    }
    for (std::size_t i = 0; i < MR; ++i) _mm512_store_ps(out + 16 * i, yacc[i]);
  }
};

// The 256-bit kernels differ only in the 4-way u8 x s8 dot product: vpdpbusd (AVX-VNNI) or
// vpmaddubsw + vpmaddwd (AVX2; no saturation since |15 * 127 * 2| < 2^15). Each needs its own
// target attribute, so the shared body is stamped out twice by this macro.
#define EDGELLM_Q4_FAST_YMM_BODY(DOT)                                                          \
  constexpr std::size_t NA = MR == 1 ? 2 : 1;                                                  \
  const __m256i m4 = _mm256_set1_epi8(0x0F);                                                   \
  [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);                                  \
  __m256 yacc[MR][2];                                                                          \
  for (std::size_t i = 0; i < MR; ++i) {                                                       \
    yacc[i][0] = _mm256_load_ps(out + 16 * i);                                                 \
    yacc[i][1] = _mm256_load_ps(out + 16 * i + 8);                                             \
  }                                                                                            \
  for (std::size_t g = 0; g < ng; ++g) {                                                       \
    const Q4Tile<G>* tl = tiles + g;                                                           \
    detail::prefetch_ahead<MR>(tl);                                                            \
    __m256i acc[MR][2][NA];                                                                    \
    for (std::size_t i = 0; i < MR; ++i)                                                       \
      for (std::size_t a = 0; a < NA; ++a) acc[i][0][a] = acc[i][1][a] = _mm256_setzero_si256(); \
    const std::int8_t* xg = xq + g * G;                                                        \
    for (std::size_t kb = 0; kb < G / 8; ++kb) {                                               \
      const __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(tl->codes[kb]));  \
      const __m256i c1 =                                                                       \
          _mm256_load_si256(reinterpret_cast<const __m256i*>(tl->codes[kb] + 32));            \
      const __m256i lo0 = _mm256_and_si256(c0, m4), lo1 = _mm256_and_si256(c1, m4);            \
      const __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(c0, 4), m4);                      \
      const __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(c1, 4), m4);                      \
      const std::size_t a = kb % NA;                                                           \
      for (std::size_t i = 0; i < MR; ++i) {                                                   \
        const std::int8_t* xp = xg + i * ldq + 8 * kb;                                         \
        const __m256i xa = _mm256_set1_epi32(detail::load_x4(xp));                             \
        const __m256i xb = _mm256_set1_epi32(detail::load_x4(xp + 4));                         \
        acc[i][0][a] = DOT(acc[i][0][a], lo0, xa);                                             \
        acc[i][0][a] = DOT(acc[i][0][a], hi0, xb);                                             \
        acc[i][1][a] = DOT(acc[i][1][a], lo1, xa);                                             \
        acc[i][1][a] = DOT(acc[i][1][a], hi1, xb);                                             \
      }                                                                                        \
    }                                                                                          \
    for (std::size_t h = 0; h < 2; ++h) {                                                      \
      const __m256 zf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(                               \
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tl->zero + 8 * h))));              \
      const __m256 sf =                                                                        \
          _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tl->scale + 8 * h))); \
      for (std::size_t i = 0; i < MR; ++i) {                                                   \
        __m256i isum = acc[i][h][0];                                                           \
        for (std::size_t aa = 1; aa < NA; ++aa) isum = _mm256_add_epi32(isum, acc[i][h][aa]);  \
        const __m256 t = _mm256_fnmadd_ps(                                                     \
            zf, _mm256_set1_ps(static_cast<float>(xs[i * lds + g])), _mm256_cvtepi32_ps(isum)); \
        yacc[i][h] =                                                                           \
            _mm256_fmadd_ps(t, _mm256_mul_ps(sf, _mm256_set1_ps(dx[i * lds + g])), yacc[i][h]); \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  for (std::size_t i = 0; i < MR; ++i) {                                                       \
    _mm256_store_ps(out + 16 * i, yacc[i][0]);                                                 \
    _mm256_store_ps(out + 16 * i + 8, yacc[i][1]);                                             \
  }

#define EDGELLM_DOT_AVXVNNI(acc, w, x) _mm256_dpbusd_avx_epi32(acc, w, x)
#define EDGELLM_DOT_AVX2(acc, w, x) \
  _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones))

/// gemm_f32_qa8g<G>_qa4g<G>p16x8_<MR>x16_avxvnni: two ymm per tile (rows 0-7, 8-15).
struct Q4FastMicroAvxVnni {
  static constexpr std::size_t mr = 3;
  static constexpr const char* name = "avx_vnni";
  template <std::size_t G, std::size_t MR>
  __attribute__((target("avxvnni,avx2,fma,f16c"))) static void run(
      const Q4Tile<G>* tiles, std::size_t ng, const std::int8_t* xq, std::size_t ldq,
      const float* dx, const std::int32_t* xs, std::size_t lds, float* out) noexcept {
    EDGELLM_Q4_FAST_YMM_BODY(EDGELLM_DOT_AVXVNNI)
  }
};

/// gemm_f32_qa8g<G>_qa4g<G>p16x8_<MR>x16_avx2: as above with vpmaddubsw + vpmaddwd.
struct Q4FastMicroAvx2 {
  static constexpr std::size_t mr = 2;
  static constexpr const char* name = "avx2";
  template <std::size_t G, std::size_t MR>
  __attribute__((target("avx2,fma,f16c"))) static void run(
      const Q4Tile<G>* tiles, std::size_t ng, const std::int8_t* xq, std::size_t ldq,
      const float* dx, const std::int32_t* xs, std::size_t lds, float* out) noexcept {
    EDGELLM_Q4_FAST_YMM_BODY(EDGELLM_DOT_AVX2)
  }
};

#undef EDGELLM_DOT_AVX2
#undef EDGELLM_DOT_AVXVNNI
#undef EDGELLM_Q4_FAST_YMM_BODY

}  // namespace edgellm::kernels::arch

EDGELLM_SUPPRESS_GCC105593_END

#endif  // EDGELLM_X86_MICROKERNELS
