// SPDX-License-Identifier: Apache-2.0
// Dense (fp32 / fp16 / bf16) matrix products, Y = X W^T + bias, for the weights kept
// unquantised: above all the lm_head (or the tied embedding), read in place from the mapped
// checkpoint. For a 4096-token vocabulary and a small hidden size it is most of a draft model's
// decode step; for Qwen2-7B it is 1.09 GB of the bytes read per token. Written once with xsimd;
// the fp16 / bf16 rows are widened by F16C / AVX-512 / NEON instructions where the build has
// them, by portable integer code elsewhere (exact either way).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include <xsimd/xsimd.hpp>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/kernels/float16.hpp"

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

/// Element type of a dense (unquantised) matrix.
enum class DenseType { f32, f16, bf16 };

constexpr std::size_t dense_element_size(DenseType t) noexcept {
  return t == DenseType::f32 ? 4 : 2;
}

/// One stored element as fp32 (exact).
template <DenseType T>
inline float dense_element(const std::byte* row, std::size_t c) noexcept {
  // memcpy: W may sit at any address (a tensor inside a mapped file)
  if constexpr (T == DenseType::f32) {
    float v;
    std::memcpy(&v, row + 4 * c, 4);
    return v;
  } else {
    std::uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    if constexpr (T == DenseType::f16)
      return f16_to_f32_branchless(h);
    else
      return bf16_to_f32(h);
  }
}

namespace reference {

/// Scalar twin of dense_matmul_rows(): rows [r0, r1) of Y = X W^T + bias in plain loops, each
/// output one sequential fp32 sum (error <= (k + 1) u sum|x w|). W: [n][k] of type t, row-major;
/// X: [m][ldx]; Y: [m][ldy]; bias: [n] or null.
inline void dense_matmul_rows(DenseType t, const std::byte* w, std::size_t k, const float* x,
                              std::size_t ldx, std::size_t m, const float* bias, float* y,
                              std::size_t ldy, std::size_t r0, std::size_t r1) noexcept {
  const std::size_t row_bytes = k * dense_element_size(t);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::byte* wr = w + r * row_bytes;
      float s = 0.0f;
      for (std::size_t c = 0; c < k; ++c) {
        const float wv = t == DenseType::f32   ? dense_element<DenseType::f32>(wr, c)
                         : t == DenseType::f16 ? dense_element<DenseType::f16>(wr, c)
                                               : dense_element<DenseType::bf16>(wr, c);
        s += x[i * ldx + c] * wv;
      }
      y[i * ldy + r] = s + (bias ? bias[r] : 0.0f);
    }
  }
}

}  // namespace reference

namespace detail {

/// W[c .. c + L) of one row as an fp32 batch (exact widening).
template <class Arch, DenseType T>
inline xsimd::batch<float, Arch> dense_load(const std::byte* row, std::size_t c) noexcept {
  using fbatch = xsimd::batch<float, Arch>;
  constexpr std::size_t L = fbatch::size;
  if constexpr (T == DenseType::f32) {
    return fbatch::load_unaligned(reinterpret_cast<const float*>(row) + c);
  } else {
    [[maybe_unused]] const std::uint16_t* p = reinterpret_cast<const std::uint16_t*>(row) + c;
#if defined(__AVX512F__)
    if constexpr (L == 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      if constexpr (T == DenseType::f16)
        return fbatch(_mm512_cvtph_ps(h));
      else
        return fbatch(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
#endif
#if defined(__AVX2__) && defined(__F16C__)
    if constexpr (L == 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      if constexpr (T == DenseType::f16)
        return fbatch(_mm256_cvtph_ps(h));
      else
        return fbatch(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
#endif
#if defined(__aarch64__)
    if constexpr (L == 4) {
      const uint16x4_t h = vld1_u16(p);
      if constexpr (T == DenseType::f16)
        return fbatch(vcvt_f32_f16(vreinterpret_f16_u16(h)));
      else
        return fbatch(vreinterpretq_f32_u32(vshll_n_u16(h, 16)));
    }
#endif
    alignas(64) float buf[L];
    for (std::size_t l = 0; l < L; ++l) buf[l] = dense_element<T>(row, c + l);
    return fbatch::load_aligned(buf);
  }
}

/// Distance of dense_dots' software prefetch, in bytes along each W row.
inline constexpr std::size_t kDensePrefetchBytes = 512;

/// MI x R dot products: out[i][r] = sum_c xs[i][c] W[r][c] for the W rows at rows[0..R) and the
/// activation rows xs[0..MI). Each 16-bit W element is widened once for all MI activation rows.
/// Per output: 16 partial sums (NACC batches of L lanes, each lane a chain of explicit FMAs over
/// the columns it owns, the k mod L tail zero-padded into one more batch), the batches added in
/// order, then a horizontal sum. The arithmetic of an output depends on k, its x row and its W
/// row only: not on R, MI, m, the row split or the thread count.
template <class Arch, DenseType T, std::size_t R, std::size_t MI>
inline void dense_dots(const std::byte* const* rows, std::size_t k, const float* const* xs,
                       float (*out)[R]) noexcept {
  using fbatch = xsimd::batch<float, Arch>;
  constexpr std::size_t L = fbatch::size;
  constexpr std::size_t NACC = L >= 16 ? 1 : 16 / L;
  fbatch acc[MI][R][NACC];
  for (std::size_t i = 0; i < MI; ++i)
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t a = 0; a < NACC; ++a) acc[i][r][a] = fbatch(0.0f);
  std::size_t c = 0;
  constexpr std::size_t E = dense_element_size(T);
  for (; c + L * NACC <= k; c += L * NACC) {
    // Software prefetch kDensePrefetchBytes ahead in each of the R rows, one cache line each
    // time a row enters a new line: R row streams per thread are more than the hardware
    // prefetcher keeps far enough ahead (the distance was chosen on Qwen2-7B's fp16 lm_head:
    // docs/performance.md, Kernels). Prefetches never fault: past the last row is harmless.
    if ((c * E) % 64 < L * NACC * E)
      for (std::size_t r = 0; r < R; ++r)
        __builtin_prefetch(reinterpret_cast<const void*>(  // an address, no pointer arithmetic
                               reinterpret_cast<std::uintptr_t>(rows[r]) + c * E +
                               kDensePrefetchBytes),
                           0, 3);
    for (std::size_t a = 0; a < NACC; ++a) {
      fbatch wv[R];
      for (std::size_t r = 0; r < R; ++r) wv[r] = dense_load<Arch, T>(rows[r], c + a * L);
      for (std::size_t i = 0; i < MI; ++i) {
        const fbatch xv = fbatch::load_unaligned(xs[i] + c + a * L);
        for (std::size_t r = 0; r < R; ++r) acc[i][r][a] = xsimd::fma(xv, wv[r], acc[i][r][a]);
      }
    }
  }
  std::size_t a = 0;  // stays < NACC: fewer than L * NACC columns are left
  for (; c + L <= k; c += L, ++a) {
    fbatch wv[R];
    for (std::size_t r = 0; r < R; ++r) wv[r] = dense_load<Arch, T>(rows[r], c);
    for (std::size_t i = 0; i < MI; ++i) {
      const fbatch xv = fbatch::load_unaligned(xs[i] + c);
      for (std::size_t r = 0; r < R; ++r) acc[i][r][a] = xsimd::fma(xv, wv[r], acc[i][r][a]);
    }
  }
  if (c < k) {  // the last k mod L columns, zero-padded to a batch: explicit FMA again, so that
                // no compiler contraction choice can make two instances of this code differ
    alignas(64) float wt[R][L] = {};
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t cc = c; cc < k; ++cc) wt[r][cc - c] = dense_element<T>(rows[r], cc);
    for (std::size_t i = 0; i < MI; ++i) {
      alignas(64) float xt[L] = {};
      for (std::size_t cc = c; cc < k; ++cc) xt[cc - c] = xs[i][cc];
      const fbatch xv = fbatch::load_aligned(xt);
      for (std::size_t r = 0; r < R; ++r)
        acc[i][r][a] = xsimd::fma(xv, fbatch::load_aligned(wt[r]), acc[i][r][a]);
    }
  }
  for (std::size_t i = 0; i < MI; ++i) {
    for (std::size_t r = 0; r < R; ++r) {
      fbatch s = acc[i][r][0];
      for (std::size_t b = 1; b < NACC; ++b) s += acc[i][r][b];
      out[i][r] = xsimd::hadd(s);
    }
  }
}

/// Whether dense_load widens 16-bit elements with a vector instruction for this Arch (then a
/// widened copy saves nothing and many activation rows widen on the fly).
template <class Arch>
constexpr bool dense_widen_in_hardware() noexcept {
  constexpr std::size_t L = xsimd::batch<float, Arch>::size;
#if defined(__AVX512F__)
  if (L == 16) return true;
#endif
#if defined(__AVX2__) && defined(__F16C__)
  if (L == 8) return true;
#endif
#if defined(__aarch64__)
  if (L == 4) return true;
#endif
  return L == 0;
}

/// Rows of W per block and activation rows per register block (R x MI x NACC accumulators).
template <class Arch>
constexpr std::size_t dense_block_rows() noexcept {
  return xsimd::batch<float, Arch>::size >= 16 ? 8 : 4;
}
template <class Arch>
constexpr std::size_t dense_block_x_rows() noexcept {
  constexpr std::size_t L = xsimd::batch<float, Arch>::size;
  return L >= 16 ? 2 : 1;  // AVX-512: 8 x 2 accumulators + 8 widened rows fit 32 registers
}

template <class Arch, DenseType T>
void dense_matmul_rows_typed(const std::byte* w, std::size_t k, const float* x, std::size_t ldx,
                             std::size_t m, const float* bias, float* y, std::size_t ldy,
                             std::size_t r0, std::size_t r1, float* scratch) noexcept {
  constexpr std::size_t R = dense_block_rows<Arch>(), MI = dense_block_x_rows<Arch>();
  const std::size_t row_bytes = k * dense_element_size(T);
  // Without a widening instruction, a 16-bit block is widened once into scratch[R][k] for many
  // activation rows: the same values, so the same bits as widening on the fly.
  const bool widen_once =
      T != DenseType::f32 && !dense_widen_in_hardware<Arch>() && m > 1 && scratch != nullptr;
  // out[i][j] += ...: Y[i0 + i][r + j] for a block of RB W rows and IB activation rows
  const auto block = [&]<DenseType TT, std::size_t RB>(const std::byte* const* rows, std::size_t r) {
    std::size_t i = 0;
    const auto store = [&]<std::size_t IB>(const float (*out)[RB], std::size_t i0) {
      for (std::size_t ii = 0; ii < IB; ++ii)
        for (std::size_t j = 0; j < RB; ++j)
          y[(i0 + ii) * ldy + r + j] = out[ii][j] + (bias ? bias[r + j] : 0.0f);
    };
    for (; i + MI <= m; i += MI) {
      const float* xs[MI];
      for (std::size_t ii = 0; ii < MI; ++ii) xs[ii] = x + (i + ii) * ldx;
      float out[MI][RB];
      dense_dots<Arch, TT, RB, MI>(rows, k, xs, out);
      store.template operator()<MI>(out, i);
    }
    for (; i < m; ++i) {
      const float* xs[1] = {x + i * ldx};
      float out[1][RB];
      dense_dots<Arch, TT, RB, 1>(rows, k, xs, out);
      store.template operator()<1>(out, i);
    }
  };
  std::size_t r = r0;
  for (; r + R <= r1; r += R) {
    const std::byte* rows[R];
    for (std::size_t j = 0; j < R; ++j) rows[j] = w + (r + j) * row_bytes;
    if (widen_once) {
      const std::byte* wide[R];
      for (std::size_t j = 0; j < R; ++j) {
        float* dst = scratch + j * k;
        for (std::size_t c = 0; c < k; ++c) dst[c] = dense_element<T>(rows[j], c);
        wide[j] = reinterpret_cast<const std::byte*>(dst);
      }
      block.template operator()<DenseType::f32, R>(wide, r);
    } else {
      block.template operator()<T, R>(rows, r);
    }
  }
  for (; r < r1; ++r) {  // the last < R rows, one at a time (same per-output arithmetic)
    const std::byte* row = w + r * row_bytes;
    block.template operator()<T, 1>(&row, r);
  }
}

}  // namespace detail

/// Floats of scratch dense_matmul_rows() can use to widen a block of 16-bit rows once for many
/// activation rows; 0 where the CPU widens as fast as it loads (F16C, AVX-512, NEON) and
/// scratch would not help. Optional either way: the bits are the same without it.
template <class Arch = xsimd::default_arch>
constexpr std::size_t dense_scratch_floats(std::size_t k) noexcept {
  if (detail::dense_widen_in_hardware<Arch>()) return 0;
  return detail::dense_block_rows<Arch>() * k;
}

/// Rows [r0, r1) of Y = X W^T + bias. W: [n][k] of type t, row-major, any alignment;
/// X: [m][ldx]; Y: [m][ldy]; bias: [n] or null; scratch: dense_scratch_floats(k) floats or null.
///
/// Numerics: each output is 16 fp32 partial sums of at most k/16 + 1 products formed by FMA,
/// combined by a fixed tree, plus the bias, so |y - y_exact| <= (k/16 + 8) u sum_c |x_c W_rc|
/// with u = 2^-24 (widening is exact). The bits of an output do not
/// depend on m, on the row range, on scratch or on the thread count, so a logit is the same
/// whether one token or a batch of tokens is run. NaN / Inf propagate (IEEE arithmetic).
template <class Arch = xsimd::default_arch>
void dense_matmul_rows(DenseType t, const std::byte* w, std::size_t k, const float* x,
                       std::size_t ldx, std::size_t m, const float* bias, float* y,
                       std::size_t ldy, std::size_t r0, std::size_t r1,
                       float* scratch = nullptr) noexcept {
  switch (t) {
    case DenseType::f32:
      detail::dense_matmul_rows_typed<Arch, DenseType::f32>(w, k, x, ldx, m, bias, y, ldy, r0, r1,
                                                            scratch);
      break;
    case DenseType::f16:
      detail::dense_matmul_rows_typed<Arch, DenseType::f16>(w, k, x, ldx, m, bias, y, ldy, r0, r1,
                                                            scratch);
      break;
    case DenseType::bf16:
      detail::dense_matmul_rows_typed<Arch, DenseType::bf16>(w, k, x, ldx, m, bias, y, ldy, r0,
                                                             r1, scratch);
      break;
  }
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
