// SPDX-License-Identifier: Apache-2.0
// Fast-path (W4A8) int4 GEMM/GEMV driver: integer dot products of int8 activations with the
// 4-bit codes, zero points folded in through per-group activation sums, fp32 scales per group.
// The driver blocks the work; microkernels (generic xsimd here, per-ISA in arch/) do the math.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <xsimd/xsimd.hpp>

#include "edgellm/config.hpp"
#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/kernels/float16.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/q8_activations.hpp"

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

/// Microkernel contract (every ISA's struct follows it):
///   static constexpr std::size_t mr;   rows of activations per call (the register block)
///   static constexpr const char* name; the ISA name printed by tests and benches
///   template <std::size_t G, std::size_t MR> static void run(
///       const Q4Tile<G>* tiles,   // the n_groups tiles of one 16-row tile row, in k order
///       std::size_t ng,           // groups
///       const std::int8_t* xq, std::size_t ldq,     // MR rows of int8 activations
///       const float* dx, const std::int32_t* xs, std::size_t lds,  // MR rows of scales/sums
///       float* out)               // [MR][16] running sums in and out (no bias), 64-byte aligned
/// continuing, for the given groups, exactly reference::gemm_q4_fast's fma chain, for every MR
/// in [1, mr]. `tiles`, `xq`, `dx` and `xs` point at the first group of the range.

/// gemm_f32_qa8g<G>_qa4g<G>p16x8_<MR>x16_generic: portable xsimd microkernel. 32-bit lane r
/// of each code word is row r; codes are extracted with shifts and masks and multiplied in
/// int32. The epilogue is scalar so it matches the twin's std::fma on every target.
template <class Arch>
struct Q4FastMicroGeneric {
  static constexpr std::size_t mr = 4;
  static constexpr const char* name = "generic";

  template <std::size_t G, std::size_t MR>
  static void run(const Q4Tile<G>* tiles, std::size_t ng, const std::int8_t* xq, std::size_t ldq,
                  const float* dx, const std::int32_t* xs, std::size_t lds, float* out) noexcept {
    using ibatch = xsimd::batch<std::int32_t, Arch>;
    constexpr std::size_t W = ibatch::size, NB = 16 / W;
    static_assert(16 % W == 0);
    const ibatch mask(0xF);
    float yacc[MR][16];
    std::memcpy(yacc, out, sizeof(yacc));
    for (std::size_t g = 0; g < ng; ++g) {
      const Q4Tile<G>* tl = tiles + g;
      ibatch acc[MR][NB];
      for (std::size_t i = 0; i < MR; ++i)
        for (std::size_t b = 0; b < NB; ++b) acc[i][b] = ibatch(0);
      for (std::size_t kb = 0; kb < G / 8; ++kb) {
        const auto* words = reinterpret_cast<const std::int32_t*>(tl->codes[kb]);
        for (std::size_t b = 0; b < NB; ++b) {
          const ibatch v = ibatch::load_aligned(words + b * W);
          for (std::size_t j = 0; j < 4; ++j) {
            const ibatch lo = (v >> static_cast<int>(8 * j)) & mask;
            const ibatch hi = (v >> static_cast<int>(8 * j + 4)) & mask;
            for (std::size_t i = 0; i < MR; ++i) {
              const std::int8_t* xp = xq + i * ldq + g * G + 8 * kb;  // g within the range
              acc[i][b] += lo * ibatch(xp[j]) + hi * ibatch(xp[4 + j]);
            }
          }
        }
      }
      for (std::size_t i = 0; i < MR; ++i) {
        alignas(64) std::int32_t dot[16];
        for (std::size_t b = 0; b < NB; ++b) acc[i][b].store_aligned(dot + b * W);
        const std::int32_t sum = xs[i * lds + g];
        const float d = dx[i * lds + g];
        for (std::size_t r = 0; r < 16; ++r) {
          const std::int32_t t = dot[r] - static_cast<std::int32_t>(tl->zero[r]) * sum;
          yacc[i][r] = std::fma(static_cast<float>(t), f16_to_f32(tl->scale[r]) * d, yacc[i][r]);
        }
      }
    }
    std::memcpy(out, yacc, sizeof(yacc));
  }
};

namespace detail {
/// Rows of activations per cache block: 128 rows x 2048 int8 (256 KiB) stay in L2 while the
/// thread's tile rows stream past them.
inline constexpr std::size_t kGemmFastRowBlock = 128;
/// Inputs per cache block: a tile row's share is 16 x 2048 nibbles + scales (17 KiB, in L1).
inline constexpr std::size_t kGemmFastKBlock = 2048;
}  // namespace detail

namespace detail {
/// Micro::run<G, R> for the runtime row count rows in [1, R]: every count has its own register
/// block, so a speculative verification of 2..7 tokens unpacks each code block once, not once
/// per token. The integer dot products are exact and each row's fp32 epilogue is the same
/// chain for any R, so the bits do not depend on how rows are grouped.
template <class Micro, std::size_t G, std::size_t R = Micro::mr>
inline void run_micro_rows(std::size_t rows, const Q4Tile<G>* tiles, std::size_t ng,
                           const std::int8_t* xq, std::size_t ldq, const float* dx,
                           const std::int32_t* xs, std::size_t lds, float* out) noexcept {
  if constexpr (R <= 1) {
    Micro::template run<G, 1>(tiles, ng, xq, ldq, dx, xs, lds, out);
  } else {
    if (rows == R) {
      Micro::template run<G, R>(tiles, ng, xq, ldq, dx, xs, lds, out);
    } else {
      run_micro_rows<Micro, G, R - 1>(rows, tiles, ng, xq, ldq, dx, xs, lds, out);
    }
  }
}
}  // namespace detail

/// Runs the fast path for output tiles [t_begin, t_end) and all rows of `a`:
/// Y[i][r] = bias[r] + (W4A8 product), Y: [m][ldy]. Blocked over rows (MB), inputs (KB) and
/// tiles; partial sums of a K block are parked in Y itself, so a later block continues the
/// same fma chain and the result is bit-identical to the unblocked twin. Thread-count
/// invariant: each output is computed by the same operations whatever the tile split, and
/// threads write disjoint 16-column stripes of Y (no shared cache lines inside a row block
/// except at stripe edges, which are written once per K block).
template <class Micro, std::size_t G>
void gemm_q4_fast_tiles(const Q4Matrix& w, const Q8ActivationsView& a,
                        const float* EDGELLM_RESTRICT bias, float* EDGELLM_RESTRICT y,
                        std::size_t ldy, std::size_t t_begin, std::size_t t_end) noexcept {
  constexpr std::size_t MR = Micro::mr, MB = detail::kGemmFastRowBlock;
  constexpr std::size_t KBG = detail::kGemmFastKBlock / G;  // groups per K block
  alignas(64) float out[MR * 16];
  const std::size_t n = w.n(), ng = w.n_groups(), m = a.m, k = a.k;
  // K blocking keeps a tile row's share in L1 while several register blocks of rows reuse it.
  // With at most MR rows (decode, speculative verification) each tile is read once, and
  // blocking would only break the thread's front-to-back stream through W into short runs
  // (and make the microkernel's prefetch run past each run's end into tiles read much later).
  const std::size_t kbg = m <= MR ? ng : KBG;
  for (std::size_t i0 = 0; i0 < m; i0 += MB) {
    const std::size_t i1 = std::min(m, i0 + MB);
    for (std::size_t g0 = 0; g0 < ng; g0 += kbg) {
      const std::size_t g1 = std::min(ng, g0 + kbg);
      const bool first = g0 == 0, last = g1 == ng;
      for (std::size_t t = t_begin; t < t_end; ++t) {
        const Q4Tile<G>* tiles = w.tile<G>(t, g0);
        const std::size_t row0 = t * 16, cols = std::min<std::size_t>(16, n - row0);
        for (std::size_t i = i0; i < i1;) {
          const std::size_t rows = std::min(MR, i1 - i);
          if (first) {
            std::fill(out, out + rows * 16, 0.0f);
          } else {
            for (std::size_t ii = 0; ii < rows; ++ii)
              for (std::size_t c = 0; c < 16; ++c)
                out[ii * 16 + c] = c < cols ? y[(i + ii) * ldy + row0 + c] : 0.0f;
          }
          const std::int8_t* xq = a.q + i * k + g0 * G;
          detail::run_micro_rows<Micro, G>(rows, tiles, g1 - g0, xq, k, a.scale + i * ng + g0,
                                           a.sum + i * ng + g0, ng, out);
          for (std::size_t ii = 0; ii < rows; ++ii)
            for (std::size_t c = 0; c < cols; ++c)
              y[(i + ii) * ldy + row0 + c] =
                  last ? out[ii * 16 + c] + (bias ? bias[row0 + c] : 0.0f) : out[ii * 16 + c];
          i += rows;
        }
      }
    }
  }
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
