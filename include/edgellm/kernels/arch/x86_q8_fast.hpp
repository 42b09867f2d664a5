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

#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/kernels/q8_activations.hpp"
#include "edgellm/kernels/q8_matrix.hpp"

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

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

/// Rows [r0, r1) with the integer dots in AVX-512 VNNI, for a compile-time group size G (a
/// multiple of 64, so the group loop unrolls). vpdpbusd multiplies unsigned by signed bytes, so
/// the codes are offset to q + 128 (in [1, 255], one vpxord with 0x80) and the activation sum
/// of the group corrects it: sum (q + 128) x - 128 sum x = sum q x, exact in int32
/// (|sum| <= 128 * 255 * 127 per group). One row at a time (a single sequential stream, which
/// the hardware prefetcher follows best); the dots of kQ8Avx512Groups consecutive groups leave
/// one tree of unpacks and adds as the lanes of an xmm (the last 1-3 groups of a row too, with
/// zero dots for the missing lanes), and the epilogue then runs the twin's operations in the
/// twin's order (acc = fma(float(dot), s * dx, acc) group by group, as scalar vfmadd on lane
/// 0), so the result equals the scalar twin bit for bit. The epilogue stays in registers: a
/// store of the lanes and scalar reloads stalled every block on store forwarding, which kept
/// the loads of the next blocks from overlapping.
template <std::size_t G>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"))) inline void
gemm_q8_fast_rows_avx512_vnni_g(const Q8Matrix& w, const Q8ActivationsView& a, const float* bias,
                                float* EDGELLM_RESTRICT y, std::size_t ldy, std::size_t r0,
                                std::size_t r1) noexcept {
  static_assert(G % 64 == 0 && kQ8Avx512Groups == 4, "the tree sums four groups of 64k bytes");
  const std::size_t ng = w.n_groups(), k = w.k();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // Macros, not lambdas: a lambda would not inherit the target attribute.
  // 16 int32 lanes whose sum is sum_{c < G} (q[c] + 128) * x[c].
#define EDGELLM_Q8_GROUP_DOT(d, q, x)                                                \
  __m512i d = _mm512_setzero_si512();                                                \
  for (std::size_t c_ = 0; c_ < G; c_ += 64)                                          \
    d = _mm512_dpbusd_epi32(d, _mm512_xor_si512(_mm512_loadu_si512((q) + c_), flip), \
                            _mm512_loadu_si512((x) + c_))
  // Per 128-bit lane: pair sums [d0 d1 d0 d1], then [d0 d1 d2 d3]; then the four lanes.
#define EDGELLM_Q8_TREE(out, d0, d1, d2, d3)                                                \
  __m128i out;                                                                              \
  {                                                                                         \
    const __m512i s01_ =                                                                    \
        _mm512_add_epi32(_mm512_unpacklo_epi32(d0, d1), _mm512_unpackhi_epi32(d0, d1));     \
    const __m512i s23_ =                                                                    \
        _mm512_add_epi32(_mm512_unpacklo_epi32(d2, d3), _mm512_unpackhi_epi32(d2, d3));     \
    const __m512i t_ = _mm512_add_epi32(_mm512_unpacklo_epi64(s01_, s23_),                  \
                                        _mm512_unpackhi_epi64(s01_, s23_));                 \
    const __m256i u_ =                                                                      \
        _mm256_add_epi32(_mm512_castsi512_si256(t_), _mm512_extracti64x4_epi64(t_, 1));     \
    out = _mm_add_epi32(_mm256_castsi256_si128(u_), _mm256_extracti128_si256(u_, 1));       \
  }
  for (std::size_t r = r0; r < r1; ++r) {
    const std::int8_t* q = w.codes(r);
    const float* s = w.scales(r);
    for (std::size_t i = 0; i < a.m; ++i) {
      const std::int8_t* xq = a.q + i * k;
      const float* dx = a.scale + i * ng;
      const std::int32_t* xs = a.sum + i * ng;
      __m128 acc = _mm_setzero_ps();  // lane 0 is the twin's acc
      std::size_t g = 0;
      for (; g + 4 <= ng; g += 4) {
        const std::size_t c = g * G;
        for (std::size_t b = 0; b < 4 * G; b += 64)
          _mm_prefetch(reinterpret_cast<const char*>(q + c + b + kQ8PrefetchBytes), _MM_HINT_T1);
        EDGELLM_Q8_GROUP_DOT(d0, q + c, xq + c);
        EDGELLM_Q8_GROUP_DOT(d1, q + c + G, xq + c + G);
        EDGELLM_Q8_GROUP_DOT(d2, q + c + 2 * G, xq + c + 2 * G);
        EDGELLM_Q8_GROUP_DOT(d3, q + c + 3 * G, xq + c + 3 * G);
        EDGELLM_Q8_TREE(dot, d0, d1, d2, d3);
        dot = _mm_sub_epi32(dot, _mm_slli_epi32(
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(xs + g)), 7));
        const __m128 f = _mm_cvtepi32_ps(dot);
        const __m128 sc = _mm_mul_ps(_mm_loadu_ps(s + g), _mm_loadu_ps(dx + g));
        acc = _mm_fmadd_ss(f, sc, acc);
        acc = _mm_fmadd_ss(_mm_movehdup_ps(f), _mm_movehdup_ps(sc), acc);
        acc = _mm_fmadd_ss(_mm_movehl_ps(f, f), _mm_movehl_ps(sc, sc), acc);
        acc = _mm_fmadd_ss(_mm_shuffle_ps(f, f, 3), _mm_shuffle_ps(sc, sc, 3), acc);
      }
      if (g < ng) {  // the last 1-3 groups; masked loads stay inside xs, s and dx
        const std::size_t left = ng - g, c = g * G;
        const __m512i zero = _mm512_setzero_si512();
        EDGELLM_Q8_GROUP_DOT(d0, q + c, xq + c);
        __m512i d1 = zero, d2 = zero;
        if (left > 1) {
          EDGELLM_Q8_GROUP_DOT(e1, q + c + G, xq + c + G);
          d1 = e1;
        }
        if (left > 2) {
          EDGELLM_Q8_GROUP_DOT(e2, q + c + 2 * G, xq + c + 2 * G);
          d2 = e2;
        }
        EDGELLM_Q8_TREE(dot, d0, d1, d2, zero);
        const __mmask8 mk = static_cast<__mmask8>((1u << left) - 1);
        dot = _mm_sub_epi32(dot, _mm_slli_epi32(_mm_maskz_loadu_epi32(mk, xs + g), 7));
        const __m128 f = _mm_cvtepi32_ps(dot);
        const __m128 sc =
            _mm_mul_ps(_mm_maskz_loadu_ps(mk, s + g), _mm_maskz_loadu_ps(mk, dx + g));
        acc = _mm_fmadd_ss(f, sc, acc);
        if (left > 1) acc = _mm_fmadd_ss(_mm_movehdup_ps(f), _mm_movehdup_ps(sc), acc);
        if (left > 2) acc = _mm_fmadd_ss(_mm_movehl_ps(f, f), _mm_movehl_ps(sc, sc), acc);
      }
      y[i * ldy + r] = _mm_cvtss_f32(acc) + (bias ? bias[r] : 0.0f);
    }
  }
#undef EDGELLM_Q8_TREE
#undef EDGELLM_Q8_GROUP_DOT
}

/// Rows [r0, r1) with the integer dots in AVX-512 VNNI (gemm_q8_fast_rows_avx512_vnni_g for the
/// matrix's group size). G a multiple of 64.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"))) inline void
gemm_q8_fast_rows_avx512_vnni(const Q8Matrix& w, const Q8ActivationsView& a, const float* bias,
                              float* EDGELLM_RESTRICT y, std::size_t ldy, std::size_t r0,
                              std::size_t r1) noexcept {
  if (w.group_size() == 64) {
    gemm_q8_fast_rows_avx512_vnni_g<64>(w, a, bias, y, ldy, r0, r1);
  } else {
    EDGELLM_ASSERT(w.group_size() == 128, "AVX-512 VNNI int8 kernel: group size 64 or 128");
    gemm_q8_fast_rows_avx512_vnni_g<128>(w, a, bias, y, ldy, r0, r1);
  }
}

}  // namespace edgellm::kernels::arch

EDGELLM_SUPPRESS_GCC105593_END

#endif  // EDGELLM_X86_MICROKERNELS
