// SPDX-License-Identifier: Apache-2.0
// Checked entry points for int4 GEMV/GEMM: argument validation, group-size and path dispatch,
// and the split of output tiles across the host's thread pool.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <xsimd/xsimd.hpp>

#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/detail/cpu_features.hpp"
#include "edgellm/kernels/arch/neon_q4_fast.hpp"
#include "edgellm/kernels/arch/x86_q4_fast.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/gemm_q4.hpp"
#include "edgellm/kernels/gemm_q4_fast.hpp"
#include "edgellm/kernels/gemv_q4.hpp"
#include "edgellm/kernels/q8_activations.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

namespace edgellm::kernels {

/// Which arithmetic a matmul uses.
enum class MatmulPath {
  exact,  ///< dequantise to fp32 and FMA: error only from fp32 summation (gemv_q4.hpp)
  fast,   ///< W4A8: activations quantised to int8 per group, integer dot products; error
          ///< bounded by reference::gemm_q4_fast's stated bound (activation rounding)
};

/// Microkernel families of the fast path. `best` picks the fastest the running CPU supports.
/// neon: Armv8.0 SMULL/SADALP; neon_dotprod: SDOT; neon_i8mm: SMMLA (one row runs SDOT).
enum class Isa { best, generic, avx2, avx_vnni, avx512_vnni, neon, neon_dotprod, neon_i8mm };

inline const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::best: return "best";
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx_vnni: return "avx_vnni";
    case Isa::avx512_vnni: return "avx512_vnni";
    case Isa::neon: return "neon";
    case Isa::neon_dotprod: return "neon_dotprod";
    case Isa::neon_i8mm: return "neon_i8mm";
  }
  return "?";
}

/// Every microkernel family (not `best`), slowest first: what tests and benches iterate over.
inline constexpr Isa kAllIsas[] = {Isa::generic,     Isa::avx2,         Isa::avx_vnni,
                                   Isa::avx512_vnni, Isa::neon,         Isa::neon_dotprod,
                                   Isa::neon_i8mm};

/// Whether this build and the running CPU can run the microkernel family.
inline bool isa_supported(Isa isa) noexcept {
  const auto& f = edgellm::detail::cpu_features();
  switch (isa) {
    case Isa::best:
    case Isa::generic: return true;
    case Isa::avx2: return EDGELLM_X86_MICROKERNELS && f.avx2;
    case Isa::avx_vnni: return EDGELLM_X86_MICROKERNELS && f.avx_vnni;
    case Isa::avx512_vnni: return EDGELLM_X86_MICROKERNELS && f.avx512_vnni;
    case Isa::neon: return EDGELLM_NEON_MICROKERNELS && f.neon;
    case Isa::neon_dotprod: return EDGELLM_NEON_MICROKERNELS && f.neon_dotprod;
    case Isa::neon_i8mm: return EDGELLM_NEON_MICROKERNELS && f.neon_i8mm;
  }
  return false;
}

/// The fastest supported family, checked at run time: a binary built on a newer CPU falls
/// back on an older one instead of dying with an illegal instruction.
inline Isa best_isa() noexcept {
  for (Isa isa : {Isa::avx512_vnni, Isa::avx_vnni, Isa::avx2, Isa::neon_i8mm, Isa::neon_dotprod,
                  Isa::neon})
    if (isa_supported(isa)) return isa;
  return Isa::generic;
}

/// Caller-owned scratch memory for the fast path (quantised activations). Reuse one per
/// session/thread to avoid an allocation per call; not thread-safe itself.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  /// A 64-byte aligned buffer of at least `bytes`, or null if allocation failed.
  std::byte* get(std::size_t bytes) noexcept {
    if (bytes > capacity_) {
      data_.reset();  // free first: the old contents are not kept
      data_ = edgellm::detail::allocate_aligned(bytes);
      capacity_ = data_ ? bytes : 0;
    }
    return data_.get();
  }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  edgellm::detail::AlignedBuffer data_;
  std::size_t capacity_ = 0;
};

/// How the caller wants a matmul run. The pool is the host's; null means the calling thread.
struct MatmulOptions {
  ThreadPool* pool = nullptr;
  MatmulPath path = MatmulPath::exact;
  Isa isa = Isa::best;             ///< fast path only; forcing an unsupported one is an error
  Workspace* workspace = nullptr;  ///< fast path scratch; null allocates per call
};

namespace detail {
inline bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

inline status check_matmul_args(std::string_view where, const Q4Matrix& w, std::size_t m,
                                std::size_t x_size, std::size_t ldx, std::size_t y_size,
                                std::size_t ldy, std::size_t bias_size, const float* x,
                                const float* y) {
  if (w.empty()) return make_error(errc::invalid_argument, where, "w: empty matrix");
  if (m == 0) return make_error(errc::invalid_argument, where, "m: must be positive");
  if (ldx < w.k()) {
    return make_error(errc::invalid_argument, where,
                      "ldx: " + std::to_string(ldx) + " is smaller than k = " +
                          std::to_string(w.k()));
  }
  if (ldy < w.n()) {
    return make_error(errc::invalid_argument, where,
                      "ldy: " + std::to_string(ldy) + " is smaller than n = " +
                          std::to_string(w.n()));
  }
  const std::size_t need_x = (m - 1) * ldx + w.k(), need_y = (m - 1) * ldy + w.n();
  if (x == nullptr || x_size < need_x) {
    return make_error(errc::invalid_argument, where,
                      "x: " + std::string(x ? "size " + std::to_string(x_size) : "null") +
                          ", need " + std::to_string(need_x) + " floats");
  }
  if (y == nullptr || y_size < need_y) {
    return make_error(errc::invalid_argument, where,
                      "y: " + std::string(y ? "size " + std::to_string(y_size) : "null") +
                          ", need " + std::to_string(need_y) + " floats");
  }
  if (bias_size != 0 && bias_size != w.n()) {
    return make_error(errc::shape_mismatch, where,
                      "bias: size " + std::to_string(bias_size) + ", expected n = " +
                          std::to_string(w.n()) + " or empty");
  }
  if (overlaps(x, need_x * sizeof(float), y, need_y * sizeof(float))) {
    return make_error(errc::invalid_argument, where, "y: overlaps x");
  }
  return {};
}

/// A checked product of run_products: Y = X W^T (+ bias), Y: [m][ldy].
struct Product {
  const Q4Matrix* w;
  const float* bias;  // [n] or null
  float* y;
  std::size_t ldy;
};

/// Runs every product over the same X [m][ldx] (all W share k and the group size), as one
/// fork-join: the products' output tiles are laid end to end and shared out across the pool
/// (ThreadPool::parallel_for_balanced). Each output is computed by the same operations as in a call of its own, so the bits
/// do not depend on the grouping or the thread count. The fast path quantises X once; the
/// exact path runs the GEMV kernel when `gemv_kernel` (m == 1 from gemv or a grouped call)
/// and the tiled GEMM otherwise.
template <class Arch>
status run_products(std::string_view where, std::span<const Product> products, const float* x,
                    std::size_t ldx, std::size_t m, bool gemv_kernel, const MatmulOptions& opts) {
  const Q4Matrix& w0 = *products.front().w;
  const std::size_t G = w0.group_size(), k = w0.k();
  std::size_t total_tiles = 0;
  for (const Product& p : products) total_tiles += p.w->n_tiles();
  // Calls fn(product, t_begin, t_end) for the part of tiles [t0, t1) of the concatenation that
  // falls into each product.
  const auto for_each_part = [&](std::size_t t0, std::size_t t1, auto&& fn) {
    std::size_t offset = 0;
    for (const Product& p : products) {
      const std::size_t nt = p.w->n_tiles();
      const std::size_t b = std::max(t0, offset), e = std::min(t1, offset + nt);
      if (b < e) fn(p, b - offset, e - offset);
      offset += nt;
    }
  };

  // Tiles are handed out in pieces of about 1/8 of a thread's share, balanced at run time: on a
  // shared host one core is often slower for a while, and a static split would wait for it
  // (docs/performance.md, Kernels).
  const std::size_t threads = opts.pool ? opts.pool->size() : 1;
  const std::size_t grain = std::max<std::size_t>(1, total_tiles / (threads * 8));
  if (opts.path == MatmulPath::exact) {
    auto body = [&](auto g_const) {
      constexpr std::size_t GG = decltype(g_const)::value;
      parallel_for_balanced(opts.pool, total_tiles, grain, [&](std::size_t t0, std::size_t t1) {
        for_each_part(t0, t1, [&](const Product& p, std::size_t b, std::size_t e) {
          if (gemv_kernel) {
            gemv_q4_exact_tiles<Arch, GG>(*p.w, x, p.bias, p.y, b, e);
          } else {
            gemm_q4_exact_tiles<Arch, GG>(*p.w, x, ldx, m, p.bias, p.y, p.ldy, b, e);
          }
        });
      });
    };
    switch (G) {
      case 32: body(std::integral_constant<std::size_t, 32>{}); break;
      case 64: body(std::integral_constant<std::size_t, 64>{}); break;
      default: body(std::integral_constant<std::size_t, 128>{}); break;
    }
    return {};
  }

  Isa isa = opts.isa == Isa::best ? best_isa() : opts.isa;
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
  // A few rows take microseconds: not worth waking the pool for.
  if (m >= 4 * threads) {
    parallel_for(opts.pool, m, [&](std::size_t i0, std::size_t i1) {
      quantize_activations_q8<Arch>(x, ldx, a, i0, i1);
    });
  } else {
    quantize_activations_q8<Arch>(x, ldx, a, 0, m);
  }
  auto with_micro = [&](auto micro_tag, auto g_const) {
    using Micro = typename decltype(micro_tag)::type;
    constexpr std::size_t GG = decltype(g_const)::value;
    const auto part = [&](std::size_t t0, std::size_t t1) {
      for_each_part(t0, t1, [&](const Product& p, std::size_t b, std::size_t e) {
        gemm_q4_fast_tiles<Micro, GG>(*p.w, a, p.bias, p.y, p.ldy, b, e);
      });
    };
    parallel_for_balanced(opts.pool, total_tiles, grain, part);
  };
  auto with_group = [&](auto micro_tag) {
    switch (G) {
      case 32: with_micro(micro_tag, std::integral_constant<std::size_t, 32>{}); break;
      case 64: with_micro(micro_tag, std::integral_constant<std::size_t, 64>{}); break;
      default: with_micro(micro_tag, std::integral_constant<std::size_t, 128>{}); break;
    }
  };
  switch (isa) {
#if EDGELLM_X86_MICROKERNELS
    case Isa::avx512_vnni: with_group(std::type_identity<arch::Q4FastMicroAvx512Vnni>{}); break;
    case Isa::avx_vnni: with_group(std::type_identity<arch::Q4FastMicroAvxVnni>{}); break;
    case Isa::avx2: with_group(std::type_identity<arch::Q4FastMicroAvx2>{}); break;
#endif
#if EDGELLM_NEON_MICROKERNELS
    case Isa::neon_i8mm: with_group(std::type_identity<arch::Q4FastMicroNeonI8mm>{}); break;
    case Isa::neon_dotprod: with_group(std::type_identity<arch::Q4FastMicroNeonDot>{}); break;
    case Isa::neon: with_group(std::type_identity<arch::Q4FastMicroNeon>{}); break;
#endif
    default: with_group(std::type_identity<Q4FastMicroGeneric<Arch>>{}); break;
  }
  return {};
}
}  // namespace detail

/// y = W x (+ bias), fp32 in and out, on opts.path (exact by default). x: [k], y: [n],
/// bias: [n] or empty.
/// Output tiles of 16 rows are shared out across opts.pool; the result is bit-identical for
/// every thread count and split. Errors name the bad argument; nothing is written on error.
template <class Arch = xsimd::default_arch>
status gemv(const Q4Matrix& w, std::span<const float> x, std::span<float> y,
            std::span<const float> bias = {}, const MatmulOptions& opts = {}) {
  if (auto st = detail::check_matmul_args("gemv", w, 1, x.size(), w.k(), y.size(), w.n(),
                                          bias.size(), x.data(), y.data());
      !st)
    return st;
  const detail::Product p{&w, bias.empty() ? nullptr : bias.data(), y.data(), w.n()};
  return detail::run_products<Arch>("gemv", std::span(&p, 1), x.data(), w.k(), 1, true, opts);
}

/// Y = X W^T (+ bias), on opts.path. X: [m][ldx], Y: [m][ldy] row-major (ldx >= k, ldy >= n;
/// 0 means packed: k and n). Tiles shared out across opts.pool; bit-identical for every thread
/// count.
template <class Arch = xsimd::default_arch>
status gemm(const Q4Matrix& w, std::span<const float> x, std::size_t m, std::span<float> y,
            std::span<const float> bias = {}, const MatmulOptions& opts = {},
            std::size_t ldx = 0, std::size_t ldy = 0) {
  if (ldx == 0) ldx = w.k();
  if (ldy == 0) ldy = w.n();
  if (auto st = detail::check_matmul_args("gemm", w, m, x.size(), ldx, y.size(), ldy,
                                          bias.size(), x.data(), y.data());
      !st)
    return st;
  const detail::Product p{&w, bias.empty() ? nullptr : bias.data(), y.data(), ldy};
  return detail::run_products<Arch>("gemm", std::span(&p, 1), x.data(), ldx, m, false, opts);
}

/// One product of gemm_multi: Y = X W^T (+ bias), Y: [m][ldy] row-major (ldy 0 means n).
struct MatmulOutput {
  const Q4Matrix* w = nullptr;
  std::span<float> y;
  std::span<const float> bias = {};
  std::size_t ldy = 0;
};

/// Several products of one input X [m][ldx] (ldx 0 means k), such as a layer's q/k/v or
/// gate/up projections: the same results, bit for bit, as gemv (m == 1) or gemm (m > 1) on each
/// output in turn, in one fork-join, with X quantised once on the fast path. Every W must have
/// the same k and group size; the outputs must not overlap X or each other. Errors name the
/// output (`outs[i].w`, `outs[i].y`, ...); nothing is written on error.
template <class Arch = xsimd::default_arch>
status gemm_multi(std::span<const MatmulOutput> outs, std::span<const float> x, std::size_t m,
                  const MatmulOptions& opts = {}, std::size_t ldx = 0) {
  constexpr std::size_t kMaxOutputs = 8;
  if (outs.empty() || outs.size() > kMaxOutputs) {
    return make_error(errc::invalid_argument, "gemm_multi",
                      "outs: " + std::to_string(outs.size()) + " outputs, expected 1 to " +
                          std::to_string(kMaxOutputs));
  }
  detail::Product products[kMaxOutputs];
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const MatmulOutput& o = outs[i];
    const std::string where = "gemm_multi: outs[" + std::to_string(i) + "]";
    if (o.w == nullptr) return make_error(errc::invalid_argument, where, "w: null");
    const Q4Matrix& w = *o.w;
    if (i > 0 && (w.k() != outs[0].w->k() || w.group_size() != outs[0].w->group_size())) {
      return make_error(errc::shape_mismatch, where,
                        "w: k = " + std::to_string(w.k()) + ", group " +
                            std::to_string(w.group_size()) + "; outs[0].w has k = " +
                            std::to_string(outs[0].w->k()) + ", group " +
                            std::to_string(outs[0].w->group_size()));
    }
    const std::size_t lx = ldx == 0 ? w.k() : ldx, ly = o.ldy == 0 ? w.n() : o.ldy;
    if (auto st = detail::check_matmul_args(where, w, m, x.size(), lx, o.y.size(), ly,
                                            o.bias.size(), x.data(), o.y.data());
        !st)
      return st;
    for (std::size_t j = 0; j < i; ++j) {
      if (detail::overlaps(o.y.data(), ((m - 1) * ly + w.n()) * sizeof(float),
                           products[j].y,
                           ((m - 1) * products[j].ldy + products[j].w->n()) * sizeof(float))) {
        return make_error(errc::invalid_argument, where,
                          "y: overlaps outs[" + std::to_string(j) + "].y");
      }
    }
    products[i] = {&w, o.bias.empty() ? nullptr : o.bias.data(), o.y.data(), ly};
  }
  const std::size_t lx = ldx == 0 ? outs[0].w->k() : ldx;
  return detail::run_products<Arch>("gemm_multi", std::span(products, outs.size()), x.data(),
                                    lx, m, m == 1, opts);
}

}  // namespace edgellm::kernels
