// SPDX-License-Identifier: Apache-2.0
// x86 microkernels for the int8-weight fast path (W8A8, kernels/gemm_q8.hpp): AVX-512 VNNI and
// AVX2. Compiled with per-function target attributes, so the host needs no -m flags; the
// dispatcher calls one only after CPUID said the CPU has it (detail/cpu_features.hpp).
// Both compute the integer group dots exactly and then the scalar twin's epilogue
// (reference::gemm_q8_fast), so their results equal it bit for bit.
#pragma once

#include "edgellm/config.hpp"

#if EDGELLM_X86_MICROKERNELS

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "edgellm/kernels/q8_activations.hpp"
#include "edgellm/kernels/q8_matrix.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see gemv_q4.hpp
#endif

namespace edgellm::kernels::arch {

/// Rows [r0, r1) of Y = Xq W^T with the integer dots in AVX2: |q| * (xq * sign(q)) by vpmaddubsw
/// (at most 2 * 127 * 127 per 16-bit lane: no saturation), then vpmaddwd into 32-bit lanes, one
/// horizontal sum per group. Any group size that is a multiple of 32.
__attribute__((target("avx2,fma"))) inline void gemm_q8_fast_rows_avx2(
    const Q8Matrix& w, const Q8ActivationsView& a, const float* bias, float* EDGELLM_RESTRICT y,
    std::size_t ldy, std::size_t r0, std::size_t r1) noexcept {
  const std::size_t ng = w.n_groups(), k = w.k(), G = w.group_size();
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::size_t r = r0; r < r1; ++r) {
    const std::int8_t* q = w.codes(r);
    const float* s = w.scales(r);
    for (std::size_t i = 0; i < a.m; ++i) {
      const std::int8_t* xq = a.q + i * k;
      const float* dx = a.scale + i * ng;
      float acc = 0.0f;
      for (std::size_t g = 0; g < ng; ++g) {
        __m256i sum = _mm256_setzero_si256();
        for (std::size_t c = g * G; c < (g + 1) * G; c += 32) {
          const __m256i vq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c));
          const __m256i vx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c));
          const __m256i p =
              _mm256_maddubs_epi16(_mm256_sign_epi8(vq, vq), _mm256_sign_epi8(vx, vq));
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, ones));
        }
        const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(sum),
                                        _mm256_extracti128_si256(sum, 1));
        const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        const std::int32_t dot = _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xB1)));
        acc = std::fma(static_cast<float>(dot), s[g] * dx[g], acc);
      }
      y[i * ldy + r] = acc + (bias ? bias[r] : 0.0f);
    }
  }
}

/// How far ahead of its reads the AVX-512 VNNI kernel prefetches the codes (into L2: see
/// kPrefetchLocality in x86_q4_fast.hpp for why not L1). The rows are contiguous, so near a
/// row's end this fetches the next row's start.
inline constexpr std::size_t kQ8PrefetchBytes = 4096;

/// Groups of one row whose dots the AVX-512 VNNI kernel sums horizontally in one tree.
inline constexpr std::size_t kQ8Avx512Groups = 4;

/// Rows [r0, r1) with the integer dots in AVX-512 VNNI. vpdpbusd multiplies unsigned by signed
/// bytes, so the codes are offset to q + 128 (in [1, 255], one vpxord with 0x80) and the
/// activation sum of the group corrects it: sum (q + 128) x - 128 sum x = sum q x, exact in
/// int32 (|sum| <= 128 * 255 * 127 per group). One row at a time (a single sequential stream,
/// which the hardware prefetcher follows best); the dots of kQ8Avx512Groups consecutive groups
/// leave one tree of unpacks and adds as the lanes of an xmm, and the epilogue then runs the
/// twin's operations in the twin's order (acc = fma(float(dot), s * dx, acc) group by group), so
/// the result equals the scalar twin bit for bit. G a multiple of 64.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"))) inline void
gemm_q8_fast_rows_avx512_vnni(const Q8Matrix& w, const Q8ActivationsView& a, const float* bias,
                              float* EDGELLM_RESTRICT y, std::size_t ldy, std::size_t r0,
                              std::size_t r1) noexcept {
  const std::size_t ng = w.n_groups(), k = w.k(), G = w.group_size();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // 16 int32 lanes whose sum is sum_{c < G} (q[c] + 128) * x[c]. A macro, not a lambda: a
  // lambda would not inherit the target attribute.
#define EDGELLM_Q8_GROUP_DOT(d, q, x)                                                \
  __m512i d = _mm512_setzero_si512();                                                \
  for (std::size_t c_ = 0; c_ < G; c_ += 64)                                          \
    d = _mm512_dpbusd_epi32(d, _mm512_xor_si512(_mm512_loadu_si512((q) + c_), flip), \
                            _mm512_loadu_si512((x) + c_))
  for (std::size_t r = r0; r < r1; ++r) {
    const std::int8_t* q = w.codes(r);
    const float* s = w.scales(r);
    for (std::size_t i = 0; i < a.m; ++i) {
      const std::int8_t* xq = a.q + i * k;
      const float* dx = a.scale + i * ng;
      const std::int32_t* xs = a.sum + i * ng;
      float acc = 0.0f;
      std::size_t g = 0;
      for (; g + kQ8Avx512Groups <= ng; g += kQ8Avx512Groups) {
        const std::size_t c = g * G;
        for (std::size_t b = 0; b < kQ8Avx512Groups * G; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(q + c + b + kQ8PrefetchBytes), _MM_HINT_T1);
        EDGELLM_Q8_GROUP_DOT(d0, q + c, xq + c);
        EDGELLM_Q8_GROUP_DOT(d1, q + c + G, xq + c + G);
        EDGELLM_Q8_GROUP_DOT(d2, q + c + 2 * G, xq + c + 2 * G);
        EDGELLM_Q8_GROUP_DOT(d3, q + c + 3 * G, xq + c + 3 * G);
        // Per 128-bit lane: pair sums [d0 d1 d0 d1], then [d0 d1 d2 d3]; then the four lanes.
        const __m512i s01 =
            _mm512_add_epi32(_mm512_unpacklo_epi32(d0, d1), _mm512_unpackhi_epi32(d0, d1));
        const __m512i s23 =
            _mm512_add_epi32(_mm512_unpacklo_epi32(d2, d3), _mm512_unpackhi_epi32(d2, d3));
        const __m512i t =
            _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
        const __m256i u =
            _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
        __m128i dot = _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
        dot = _mm_sub_epi32(dot, _mm_slli_epi32(
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(xs + g)), 7));
        alignas(16) float f[kQ8Avx512Groups], sc[kQ8Avx512Groups];
        _mm_store_ps(f, _mm_cvtepi32_ps(dot));
        _mm_store_ps(sc, _mm_mul_ps(_mm_loadu_ps(s + g), _mm_loadu_ps(dx + g)));
        for (std::size_t j = 0; j < kQ8Avx512Groups; ++j) acc = std::fma(f[j], sc[j], acc);
      }
      for (; g < ng; ++g) {
        EDGELLM_Q8_GROUP_DOT(d, q + g * G, xq + g * G);
        const std::int32_t dot = _mm512_reduce_add_epi32(d) - 128 * xs[g];
        acc = std::fma(static_cast<float>(dot), s[g] * dx[g], acc);
      }
      y[i * ldy + r] = acc + (bias ? bias[r] : 0.0f);
    }
  }
#undef EDGELLM_Q8_GROUP_DOT
}

}  // namespace edgellm::kernels::arch

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // EDGELLM_X86_MICROKERNELS
