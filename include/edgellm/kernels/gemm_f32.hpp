// SPDX-License-Identifier: Apache-2.0
// fp32 GEMM for many activation rows, Y = X W^T + bias: the products of the AWQ search
// (quant/awq_search.hpp), thousands of calibration tokens through fp32 candidate weights, where
// dense_matmul_rows' dot-product layout (built for the few rows of decode) reaches less than
// half of the FMA units. W is first packed into panels of NR rows stored column by column
// ([k][NR]), then a register block of MR activation rows x NR columns is accumulated with one
// broadcast of x and two vector loads of W per column: no horizontal sums, W's panel slice in
// L1 while a chunk of X sits in L2 (BLIS's loop order). Written once with xsimd.
#pragma once

#include "edgellm/detail/diagnostics.hpp"
#include <algorithm>
#include <cmath>
#include <cstddef>

#include <xsimd/xsimd.hpp>

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

namespace reference {

/// Scalar twin of gemm_f32_rows(): rows [r0, r1) of Y = X W^T + bias, each output one
/// sequential chain of multiply-adds over c = 0 .. k-1 from 0, then + bias: what the fast path
/// computes with the build's default xsimd arch, bit for bit. The multiply-adds are fused where
/// that arch's vector FMA is (x86 builds with FMA3 or AVX-512, arm64), a product then a sum
/// elsewhere (SSE / AVX without FMA, whose targets cannot contract them either).
/// W: [n][ldw], X: [m][ldx], Y: [m][ldy], bias [n] or null.
inline void gemm_f32(const float* w, std::size_t ldw, std::size_t k, const float* x,
                     std::size_t ldx, std::size_t m, const float* bias, float* y, std::size_t ldy,
                     std::size_t r0, std::size_t r1) noexcept {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t r = r0; r < r1; ++r) {
      float s = 0.0f;
      for (std::size_t c = 0; c < k; ++c) {
#if defined(__FMA__) || defined(__aarch64__)
        s = std::fma(x[i * ldx + c], w[r * ldw + c], s);
#else
        s = s + x[i * ldx + c] * w[r * ldw + c];
#endif
      }
      y[i * ldy + r] = bias ? s + bias[r] : s;
    }
}

}  // namespace reference

/// The register block of the fast path: gemm_f32_panel_rows() W rows per panel (two vectors),
/// gemm_f32_block_x_rows() activation rows (2 x MR accumulators fit the register file).
template <class Arch = xsimd::default_arch>
constexpr std::size_t gemm_f32_panel_rows() noexcept {
  return 2 * xsimd::batch<float, Arch>::size;
}
template <class Arch = xsimd::default_arch>
constexpr std::size_t gemm_f32_block_x_rows() noexcept {
#if defined(__aarch64__) || defined(__AVX512F__)
  return 8;  // 32 vector registers: 16 accumulators, 2 of W, 1 broadcast
#else
  return 6;  // 16 registers: 12 accumulators
#endif
}

/// Panels of W [n][k] (ceil(n / NR) of them) and the floats their packing takes.
template <class Arch = xsimd::default_arch>
constexpr std::size_t gemm_f32_panels(std::size_t n) noexcept {
  return (n + gemm_f32_panel_rows<Arch>() - 1) / gemm_f32_panel_rows<Arch>();
}
template <class Arch = xsimd::default_arch>
constexpr std::size_t gemm_f32_packed_floats(std::size_t n, std::size_t k) noexcept {
  return gemm_f32_panels<Arch>(n) * k * gemm_f32_panel_rows<Arch>();
}

/// Packs panels [p0, p1) of W [n][ldw] (its first k columns) into `packed`
/// (gemm_f32_packed_floats(n, k) floats; aligned to 64 bytes is fastest): panel p
/// holds rows p*NR .. p*NR+NR-1 as [k][NR], rows past n zero. Panels are independent, so
/// threads may pack disjoint ranges.
template <class Arch = xsimd::default_arch>
inline void gemm_f32_pack(const float* w, std::size_t ldw, std::size_t n, std::size_t k,
                          std::size_t p0, std::size_t p1, float* packed) noexcept {
  constexpr std::size_t NR = gemm_f32_panel_rows<Arch>();
  for (std::size_t p = p0; p < p1; ++p) {
    float* dst = packed + p * k * NR;
    for (std::size_t j = 0; j < NR; ++j) {
      const std::size_t r = p * NR + j;
      if (r < n) {
        const float* src = w + r * ldw;
        for (std::size_t c = 0; c < k; ++c) dst[c * NR + j] = src[c];
      } else {
        for (std::size_t c = 0; c < k; ++c) dst[c * NR + j] = 0.0f;
      }
    }
  }
}

/// As gemm_f32_pack for W given transposed, Wt [k][ldwt] (W[r][c] = Wt[c][r], its first n
/// columns): Y = X Wt, as attention's P V.
template <class Arch = xsimd::default_arch>
inline void gemm_f32_pack_transposed(const float* wt, std::size_t ldwt, std::size_t n,
                                     std::size_t k, std::size_t p0, std::size_t p1,
                                     float* packed) noexcept {
  constexpr std::size_t NR = gemm_f32_panel_rows<Arch>();
  for (std::size_t p = p0; p < p1; ++p) {
    float* dst = packed + p * k * NR;
    const std::size_t r0 = p * NR, cols = std::min(NR, n - r0);
    for (std::size_t c = 0; c < k; ++c) {
      const float* src = wt + c * ldwt + r0;
      for (std::size_t j = 0; j < cols; ++j) dst[c * NR + j] = src[j];
      for (std::size_t j = cols; j < NR; ++j) dst[c * NR + j] = 0.0f;
    }
  }
}

namespace detail {

/// Columns [c0, c0 + kc) of a block of MI activation rows times one packed panel slice,
/// accumulated into acc (loaded from / stored to out [MI][NR], row stride ldo): each output a
/// sequential FMA chain over the columns, as reference::gemm_f32.
template <class Arch, std::size_t MI>
inline void gemm_f32_block(const float* x, std::size_t ldx, const float* panel, std::size_t kc,
                           float* out, std::size_t ldo, bool first) noexcept {
  using fbatch = xsimd::batch<float, Arch>;
  constexpr std::size_t L = fbatch::size, NR = 2 * L;
  fbatch acc[MI][2];
  for (std::size_t i = 0; i < MI; ++i) {
    if (first) {
      acc[i][0] = fbatch(0.0f);
      acc[i][1] = fbatch(0.0f);
    } else {
      acc[i][0] = fbatch::load_unaligned(out + i * ldo);
      acc[i][1] = fbatch::load_unaligned(out + i * ldo + L);
    }
  }
  for (std::size_t c = 0; c < kc; ++c) {
    const fbatch w0 = fbatch::load_unaligned(panel + c * NR);
    const fbatch w1 = fbatch::load_unaligned(panel + c * NR + L);
    for (std::size_t i = 0; i < MI; ++i) {
      const fbatch xb(x[i * ldx + c]);
      acc[i][0] = xsimd::fma(xb, w0, acc[i][0]);
      acc[i][1] = xsimd::fma(xb, w1, acc[i][1]);
    }
  }
  for (std::size_t i = 0; i < MI; ++i) {
    acc[i][0].store_unaligned(out + i * ldo);
    acc[i][1].store_unaligned(out + i * ldo + L);
  }
}

/// gemm_f32_block for MI = 1 .. MAX chosen at run time (the last rows of X).
template <class Arch, std::size_t MAX>
inline void gemm_f32_block_tail(std::size_t mi, const float* x, std::size_t ldx,
                                const float* panel, std::size_t kc, float* out, std::size_t ldo,
                                bool first) noexcept {
  if constexpr (MAX > 0) {
    if (mi == MAX) return gemm_f32_block<Arch, MAX>(x, ldx, panel, kc, out, ldo, first);
    gemm_f32_block_tail<Arch, MAX - 1>(mi, x, ldx, panel, kc, out, ldo, first);
  }
}

}  // namespace detail

/// The columns of Y that panels [p0, p1) of the packed W (gemm_f32_pack of W [n][k]) give:
/// Y[i][r] = sum_c X[i][c] W[r][c] + bias[r] for all m rows and r in [p0 * NR, min(p1 * NR, n)).
/// X: [m][ldx]; Y: [m][ldy]; bias: [n] or null.
///
/// Numerics: each output is one chain of fused multiply-adds over c in order from 0, then the
/// bias: bit for bit reference::gemm_f32, so the result depends on neither the panel split nor
/// the thread count (|y - y_exact| <= k u sum_c |x_c w_rc| + u |y|, u = 2^-24). NaN / Inf
/// propagate. Threads give disjoint panel ranges; Y's columns are written by their panel only.
template <class Arch = xsimd::default_arch>
void gemm_f32_rows(const float* packed, std::size_t n, std::size_t k, const float* x,
                   std::size_t ldx, std::size_t m, const float* bias, float* y, std::size_t ldy,
                   std::size_t p0, std::size_t p1) noexcept {
  constexpr std::size_t NR = gemm_f32_panel_rows<Arch>(), MR = gemm_f32_block_x_rows<Arch>();
  // KC columns of a panel (KC x NR floats: 32 KB at NR 16, 64 KB at NR 32) stay in L1 while
  // MC rows of X (MC x KC floats, 240 KB at most) stay in L2 across the thread's panels.
  constexpr std::size_t KC = NR >= 32 ? 512 : 256;
  constexpr std::size_t MC = NR >= 32 ? 120 : 144;  // multiples of MR (8 and 6)
  if (k == 0) {
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t r = p0 * NR; r < std::min(p1 * NR, n); ++r)
        y[i * ldy + r] = bias ? 0.0f + bias[r] : 0.0f;
    return;
  }
  alignas(64) float edge[MR * NR];  // a block's outputs when its panel passes n
  for (std::size_t c0 = 0; c0 < k; c0 += KC) {
    const std::size_t kc = std::min(KC, k - c0);
    const bool first = c0 == 0;
    for (std::size_t i0 = 0; i0 < m; i0 += MC) {
      const std::size_t i1 = std::min(m, i0 + MC);
      for (std::size_t p = p0; p < p1; ++p) {
        const float* panel = packed + p * k * NR + c0 * NR;
        const std::size_t r = p * NR, cols = std::min(NR, n - r);
        for (std::size_t i = i0; i < i1; i += MR) {
          const std::size_t mi = std::min(MR, i1 - i);
          const float* xi = x + i * ldx + c0;
          if (cols == NR) {
            detail::gemm_f32_block_tail<Arch, MR>(mi, xi, ldx, panel, kc, y + i * ldy + r, ldy,
                                                  first);
          } else {  // through `edge`, so that columns past n are never written
            for (std::size_t ii = 0; ii < mi; ++ii)
              for (std::size_t j = 0; j < NR; ++j)
                edge[ii * NR + j] = !first && j < cols ? y[(i + ii) * ldy + r + j] : 0.0f;
            detail::gemm_f32_block_tail<Arch, MR>(mi, xi, ldx, panel, kc, edge, NR, first);
            for (std::size_t ii = 0; ii < mi; ++ii)
              for (std::size_t j = 0; j < cols; ++j) y[(i + ii) * ldy + r + j] = edge[ii * NR + j];
          }
        }
      }
    }
  }
  if (bias)
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t r = p0 * NR; r < std::min(p1 * NR, n); ++r) y[i * ldy + r] += bias[r];
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
