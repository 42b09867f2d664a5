// SPDX-License-Identifier: Apache-2.0
// Exact-path int4 GEMM (prefill, Y = X W^T): tiles dequantised once per block of rows, then an
// fp32 register-blocked FMA microkernel written once with xsimd.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "edgellm/config.hpp"
#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

namespace detail {

/// Rows of X per cache block: each dequantised weight panel is reused by this many rows.
inline constexpr std::size_t kGemmExactRowBlock = 64;
/// Input channels per dequantised panel: 256 x 16 fp32 = 16 KiB, resident in L1.
inline constexpr std::size_t kGemmExactKChunk = 256;

/// Dequantises tile row t, input channels [k0, k0 + kc), into wbuf[kc][16] (exact fp32 weights:
/// (q - z) is an integer in [-15, 15] and s has 11 significant bits).
template <std::size_t G>
inline void dequant_tile_panel(const Q4Matrix& w, std::size_t t, std::size_t k0, std::size_t kc,
                               float* EDGELLM_RESTRICT wbuf) noexcept {
  for (std::size_t g = k0 / G; g < (k0 + kc) / G; ++g) {
    const Q4Tile<G>* tile = w.tile<G>(t, g);
    float* out = wbuf + (g * G - k0) * 16;
    for (std::size_t r = 0; r < 16; ++r) {
      const float s = f16_to_f32(tile->scale[r]);
      const int z = tile->zero[r];
      for (std::size_t kb = 0; kb < G / 8; ++kb) {
        for (std::size_t j = 0; j < 4; ++j) {
          const int byte = tile->codes[kb][4 * r + j];
          out[(8 * kb + j) * 16 + r] = static_cast<float>((byte & 0xF) - z) * s;
          out[(8 * kb + 4 + j) * 16 + r] = static_cast<float>((byte >> 4) - z) * s;
        }
      }
    }
  }
}

/// gemm_f32_f32_f32p16_<MR>x16: C[MR][16] += X[MR][kc] * Wpanel[kc][16]; C rows at stride 16.
template <class Arch, std::size_t MR>
inline void gemm_f32_panel_microkernel(const float* EDGELLM_RESTRICT x, std::size_t ldx,
                                       const float* EDGELLM_RESTRICT wbuf, std::size_t kc,
                                       float* EDGELLM_RESTRICT c) noexcept {
  using fbatch = xsimd::batch<float, Arch>;
  constexpr std::size_t W = fbatch::size, NB = 16 / W;
  fbatch acc[MR][NB];
  for (std::size_t i = 0; i < MR; ++i)
    for (std::size_t b = 0; b < NB; ++b) acc[i][b] = fbatch::load_aligned(c + i * 16 + b * W);
  for (std::size_t kk = 0; kk < kc; ++kk) {
    fbatch wv[NB];
    for (std::size_t b = 0; b < NB; ++b) wv[b] = fbatch::load_aligned(wbuf + kk * 16 + b * W);
    for (std::size_t i = 0; i < MR; ++i) {
      const fbatch xb(x[i * ldx + kk]);
      for (std::size_t b = 0; b < NB; ++b) acc[i][b] = xsimd::fma(xb, wv[b], acc[i][b]);
    }
  }
  for (std::size_t i = 0; i < MR; ++i)
    for (std::size_t b = 0; b < NB; ++b) acc[i][b].store_aligned(c + i * 16 + b * W);
}

}  // namespace detail

/// gemm_f32_f32_qa4g<G>_exact<Arch>: Y[i][r] = bias[r] + sum_k X[i][k] w[r][k] for all m rows
/// and the output rows of tiles [t_begin, t_end). X: [m][ldx], Y: [m][ldy], row-major fp32.
/// Each 16 x 256 weight panel is dequantised once per block of 64 rows of X, so dequantisation
/// costs O(n k m / 64) instead of O(n k m). Weights are exact in fp32, so the only rounding is
/// fp32 accumulation in k order: |err| <= (k + 2) * 2^-24 * sum_k |x w| per output.
/// The result does not depend on how tiles are split across threads.
template <class Arch, std::size_t G>
void gemm_q4_exact_tiles(const Q4Matrix& w, const float* EDGELLM_RESTRICT x, std::size_t ldx,
                         std::size_t m, const float* EDGELLM_RESTRICT bias,
                         float* EDGELLM_RESTRICT y, std::size_t ldy, std::size_t t_begin,
                         std::size_t t_end) noexcept {
  using fbatch = xsimd::batch<float, Arch>;
  constexpr std::size_t NB = 16 / fbatch::size;
  constexpr std::size_t MR = NB == 1 ? 8 : NB == 2 ? 6 : 3;
  constexpr std::size_t MB = detail::kGemmExactRowBlock;
  constexpr std::size_t KC = detail::kGemmExactKChunk >= G ? detail::kGemmExactKChunk : G;
  static_assert(KC % G == 0);
  alignas(64) float wbuf[KC * 16];  // [kc][16] dequantised panel
  alignas(64) float cbuf[MB * 16];  // [mb][16] accumulators of one row block
  const std::size_t k = w.k(), n = w.n();

  for (std::size_t t = t_begin; t < t_end; ++t) {
    const std::size_t row0 = t * 16, rows = std::min<std::size_t>(16, n - row0);
    for (std::size_t i0 = 0; i0 < m; i0 += MB) {
      const std::size_t mb = std::min(MB, m - i0);
      std::fill(cbuf, cbuf + mb * 16, 0.0f);
      for (std::size_t k0 = 0; k0 < k; k0 += KC) {
        const std::size_t kc = std::min(KC, k - k0);
        detail::dequant_tile_panel<G>(w, t, k0, kc, wbuf);
        std::size_t i = 0;
        for (; i + MR <= mb; i += MR)
          detail::gemm_f32_panel_microkernel<Arch, MR>(x + (i0 + i) * ldx + k0, ldx, wbuf, kc,
                                                       cbuf + i * 16);
        for (; i < mb; ++i)
          detail::gemm_f32_panel_microkernel<Arch, 1>(x + (i0 + i) * ldx + k0, ldx, wbuf, kc,
                                                      cbuf + i * 16);
      }
      for (std::size_t i = 0; i < mb; ++i)
        for (std::size_t r = 0; r < rows; ++r)
          y[(i0 + i) * ldy + row0 + r] = cbuf[i * 16 + r] + (bias ? bias[row0 + r] : 0.0f);
    }
  }
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
