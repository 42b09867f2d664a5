// SPDX-License-Identifier: Apache-2.0
// int8 weight GEMV/GEMM (Q8Matrix): the exact path (dequantise, fp32 FMA) and the fast W8A8 path
// (activations quantised per group as for int4, integer dot products), with argument checks and
// the split of output rows across the host's thread pool.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "edgellm/config.hpp"
#include "edgellm/detail/diagnostics.hpp"
#include "edgellm/kernels/matmul.hpp"
#include "edgellm/kernels/q8_activations.hpp"
#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

#include "edgellm/kernels/arch/neon_q8_fast.hpp"
#include "edgellm/kernels/arch/x86_q8_fast.hpp"

EDGELLM_SUPPRESS_GCC105593_BEGIN  // see detail/diagnostics.hpp

namespace edgellm::kernels {

/// Output rows a thread takes at a time (the unit of the split across the pool).
inline constexpr std::size_t kQ8RowBlock = 16;

/// Exact path, rows [r0, r1) of Y = X W^T (+ bias) for the m rows of X [m][ldx].
/// Numerics, per output (i, r): W-lane fp32 accumulators a_g = sum_{c in g} float(q[r][c]) * x[c]
/// (FMA, lane l takes c = l mod W), then y_v = fma(s[r][g], a_g, y_v) lane-wise over the groups in
/// order, y = hadd(y_v) + bias. Each output depends only on its own row and inputs, so the result
/// does not depend on the split or thread count, and gemm with m = 1 equals gemv.
/// Error: fp32 summation only, |y - W x| <= (k + 2) 2^-24 sum |w x| (test bound).
template <class Arch, std::size_t G>
void gemm_q8_exact_rows(const Q8Matrix& w, const float* EDGELLM_RESTRICT x, std::size_t ldx,
                        std::size_t m, const float* bias, float* EDGELLM_RESTRICT y,
                        std::size_t ldy, std::size_t r0, std::size_t r1) noexcept {
  using fbatch = xsimd::batch<float, Arch>;
  constexpr std::size_t W = fbatch::size;
  static_assert(G % W == 0, "group size must be a multiple of the vector width");
  const std::size_t ng = w.n_groups();
  alignas(64) float wf[G];  // one group of one row's codes as fp32 (exact)
  for (std::size_t r = r0; r < r1; ++r) {
    const std::int8_t* q = w.codes(r);
    const float* s = w.scales(r);
    for (std::size_t i = 0; i < m; ++i) {
      const float* xr = x + i * ldx;
      fbatch yv(0.0f);
      for (std::size_t g = 0; g < ng; ++g) {
        const std::int8_t* qg = q + g * G;
        for (std::size_t c = 0; c < G; ++c) wf[c] = static_cast<float>(qg[c]);
        fbatch acc(0.0f);
        for (std::size_t c = 0; c < G; c += W)
          acc = xsimd::fma(fbatch::load_aligned(wf + c), fbatch::load_unaligned(xr + g * G + c),
                           acc);
        yv = xsimd::fma(fbatch(s[g]), acc, yv);
      }
      y[i * ldy + r] = xsimd::hadd(yv) + (bias ? bias[r] : 0.0f);
    }
  }
}

/// Fast path (W8A8), rows [r0, r1) over the quantised activations a. Per output (i, r):
///   t_g = sum_{c in g} q[r][c] * xq[i][c]                    (exact int32)
///   y = fma(float(t_g), s[r][g] * dx[i][g], y) over g in order, then y + bias
/// exactly as reference::gemm_q8_fast, so the result equals the twin bit for bit on every ISA.
/// The integer loop has a constant trip count and is left to the compiler's vectoriser
/// (pmaddwd / sdot-class code at -O2 -march=native); the epilogue is scalar per group.
template <std::size_t G>
void gemm_q8_fast_rows(const Q8Matrix& w, const Q8ActivationsView& a, const float* bias,
                       float* EDGELLM_RESTRICT y, std::size_t ldy, std::size_t r0,
                       std::size_t r1) noexcept {
  const std::size_t ng = w.n_groups(), k = w.k();
  for (std::size_t r = r0; r < r1; ++r) {
    const std::int8_t* q = w.codes(r);
    const float* s = w.scales(r);
    for (std::size_t i = 0; i < a.m; ++i) {
      const std::int8_t* xq = a.q + i * k;
      const float* dx = a.scale + i * ng;
      float acc = 0.0f;
      for (std::size_t g = 0; g < ng; ++g) {
        const std::int8_t* qg = q + g * G;
        const std::int8_t* xg = xq + g * G;
        std::int32_t dot = 0;
        for (std::size_t c = 0; c < G; ++c)
          dot += static_cast<std::int32_t>(qg[c]) * static_cast<std::int32_t>(xg[c]);
        acc = std::fma(static_cast<float>(dot), s[g] * dx[g], acc);
      }
      y[i * ldy + r] = acc + (bias ? bias[r] : 0.0f);
    }
  }
}


namespace detail {
inline status check_q8_args(std::string_view where, const Q8Matrix& w, std::size_t m,
                            std::size_t x_size, std::size_t ldx, std::size_t y_size,
                            std::size_t ldy, std::size_t bias_size, const float* x,
                            const float* y) {
  if (w.empty()) return make_error(errc::invalid_argument, where, "w: empty matrix");
  if (m == 0) return make_error(errc::invalid_argument, where, "m: must be positive");
  if (ldx < w.k() || ldy < w.n()) {
    return make_error(errc::invalid_argument, where,
                      "ldx/ldy: " + std::to_string(ldx) + "/" + std::to_string(ldy) +
                          " smaller than k/n = " + std::to_string(w.k()) + "/" +
                          std::to_string(w.n()));
  }
  const std::size_t need_x = (m - 1) * ldx + w.k(), need_y = (m - 1) * ldy + w.n();
  if (x == nullptr || x_size < need_x) {
    return make_error(errc::invalid_argument, where,
                      "x: size " + std::to_string(x ? x_size : 0) + ", need " +
                          std::to_string(need_x) + " floats");
  }
  if (y == nullptr || y_size < need_y) {
    return make_error(errc::invalid_argument, where,
                      "y: size " + std::to_string(y ? y_size : 0) + ", need " +
                          std::to_string(need_y) + " floats");
  }
  if (bias_size != 0 && bias_size != w.n()) {
    return make_error(errc::shape_mismatch, where,
                      "bias: size " + std::to_string(bias_size) + ", expected n = " +
                          std::to_string(w.n()) + " or empty");
  }
  if (overlaps(x, need_x * sizeof(float), y, need_y * sizeof(float)))
    return make_error(errc::invalid_argument, where, "y: overlaps x");
  return {};
}

template <class Arch>
status run_q8(std::string_view where, const Q8Matrix& w, const float* x, std::size_t ldx,
              std::size_t m, const float* bias, float* y, std::size_t ldy,
              const MatmulOptions& opts) {
  const std::size_t G = w.group_size(), k = w.k();
  const std::size_t blocks = (w.n() + kQ8RowBlock - 1) / kQ8RowBlock;
  const std::size_t threads = opts.pool ? opts.pool->size() : 1;
  const std::size_t grain = std::max<std::size_t>(1, blocks / (threads * 8));
  const auto rows = [&](std::size_t b0, std::size_t b1) {
    return std::pair{b0 * kQ8RowBlock, std::min(w.n(), b1 * kQ8RowBlock)};
  };
  const auto with_group = [&](auto fn) {
    switch (G) {
      case 32: fn(std::integral_constant<std::size_t, 32>{}); break;
      case 64: fn(std::integral_constant<std::size_t, 64>{}); break;
      default: fn(std::integral_constant<std::size_t, 128>{}); break;
    }
  };
  if (opts.path == MatmulPath::exact) {
    with_group([&](auto g_const) {
      constexpr std::size_t GG = decltype(g_const)::value;
      parallel_for_balanced(opts.pool, blocks, grain, [&](std::size_t b0, std::size_t b1) {
        const auto [r0, r1] = rows(b0, b1);
        gemm_q8_exact_rows<Arch, GG>(w, x, ldx, m, bias, y, ldy, r0, r1);
      });
    });
    return {};
  }
  // Microkernels: AVX-512 VNNI (group sizes that are multiples of 64), AVX2 for the other x86
  // families, SDOT on arm64 cores with dotprod, the compiler-vectorised one otherwise (plain
  // NEON included); an ISA is checked so that forcing one the CPU lacks is the same error as
  // for int4.
  const Isa isa = opts.isa == Isa::best ? best_isa() : opts.isa;
  if (!isa_supported(isa)) {
    return make_error(errc::unsupported, where,
                      std::string("isa: ") + isa_name(isa) + " is not supported by this CPU/build");
  }
  Workspace local;
  Workspace& ws = opts.workspace ? *opts.workspace : local;
  std::byte* buf = ws.get(q8_activation_bytes(m, k, G));
  if (buf == nullptr) {
    return edgellm::detail::allocation_error(where, "workspace (int8 activations)",
                                             q8_activation_bytes(m, k, G));
  }
  const Q8ActivationsView a = make_q8_view(buf, m, k, G);
  quantize_activations_q8<Arch>(x, ldx, a, 0, m);
#if EDGELLM_X86_MICROKERNELS
  if (isa == Isa::avx512_vnni && G % 64 == 0) {
    parallel_for_balanced(opts.pool, blocks, grain, [&](std::size_t b0, std::size_t b1) {
      const auto [r0, r1] = rows(b0, b1);
      arch::gemm_q8_fast_rows_avx512_vnni(w, a, bias, y, ldy, r0, r1);
    });
    return {};
  }
  if (isa == Isa::avx2 || isa == Isa::avx_vnni || isa == Isa::avx512_vnni) {
    parallel_for_balanced(opts.pool, blocks, grain, [&](std::size_t b0, std::size_t b1) {
      const auto [r0, r1] = rows(b0, b1);
      arch::gemm_q8_fast_rows_avx2(w, a, bias, y, ldy, r0, r1);
    });
    return {};
  }
#endif
#if EDGELLM_NEON_MICROKERNELS
  if (isa == Isa::neon_dotprod || isa == Isa::neon_i8mm) {
    parallel_for_balanced(opts.pool, blocks, grain, [&](std::size_t b0, std::size_t b1) {
      const auto [r0, r1] = rows(b0, b1);
      arch::gemm_q8_fast_rows_dotprod(w, a, bias, y, ldy, r0, r1);
    });
    return {};
  }
#endif
  with_group([&](auto g_const) {
    constexpr std::size_t GG = decltype(g_const)::value;
    parallel_for_balanced(opts.pool, blocks, grain, [&](std::size_t b0, std::size_t b1) {
      const auto [r0, r1] = rows(b0, b1);
      gemm_q8_fast_rows<GG>(w, a, bias, y, ldy, r0, r1);
    });
  });
  return {};
}
}  // namespace detail

/// y = W x (+ bias) for an int8 W, on opts.path (exact by default). x: [k], y: [n], bias: [n]
/// or empty. Rows shared out across opts.pool; bit-identical for every thread count. Errors
/// name the bad argument; nothing is written on error.
template <class Arch = xsimd::default_arch>
status gemv(const Q8Matrix& w, std::span<const float> x, std::span<float> y,
            std::span<const float> bias = {}, const MatmulOptions& opts = {}) {
  if (auto st = detail::check_q8_args("gemv", w, 1, x.size(), w.k(), y.size(), w.n(),
                                      bias.size(), x.data(), y.data());
      !st)
    return st;
  return detail::run_q8<Arch>("gemv", w, x.data(), w.k(), 1,
                              bias.empty() ? nullptr : bias.data(), y.data(), w.n(), opts);
}

/// Y = X W^T (+ bias) for an int8 W, on opts.path. X: [m][ldx], Y: [m][ldy] (0 means k / n).
/// Each output row of Y equals gemv on that row of X, bit for bit.
template <class Arch = xsimd::default_arch>
status gemm(const Q8Matrix& w, std::span<const float> x, std::size_t m, std::span<float> y,
            std::span<const float> bias = {}, const MatmulOptions& opts = {},
            std::size_t ldx = 0, std::size_t ldy = 0) {
  if (ldx == 0) ldx = w.k();
  if (ldy == 0) ldy = w.n();
  if (auto st = detail::check_q8_args("gemm", w, m, x.size(), ldx, y.size(), ldy, bias.size(),
                                      x.data(), y.data());
      !st)
    return st;
  return detail::run_q8<Arch>("gemm", w, x.data(), ldx, m, bias.empty() ? nullptr : bias.data(),
                              y.data(), ldy, opts);
}

}  // namespace edgellm::kernels

EDGELLM_SUPPRESS_GCC105593_END
