// SPDX-License-Identifier: Apache-2.0
// Checked entry points for int4 GEMV/GEMM: argument validation, group-size and path dispatch,
// and the split of output tiles across the host's thread pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <xsimd/xsimd.hpp>

#include "edgellm/kernels/formats.hpp"
#include "edgellm/kernels/gemm_q4.hpp"
#include "edgellm/kernels/gemv_q4.hpp"
#include "edgellm/result.hpp"
#include "edgellm/thread_pool.hpp"

namespace edgellm::kernels {

/// How the caller wants a matmul run. The pool is the host's; null means the calling thread.
struct MatmulOptions {
  ThreadPool* pool = nullptr;
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
}  // namespace detail

/// y = W x (+ bias), exact path, fp32 in and out. x: [k], y: [n], bias: [n] or empty.
/// Output tiles of 16 rows are split evenly across opts.pool; the result is bit-identical for
/// every thread count. Errors name the bad argument; nothing is written on error.
template <class Arch = xsimd::default_arch>
status gemv(const Q4Matrix& w, std::span<const float> x, std::span<float> y,
            std::span<const float> bias = {}, const MatmulOptions& opts = {}) {
  if (auto st = detail::check_matmul_args("gemv", w, 1, x.size(), w.k(), y.size(), w.n(),
                                          bias.size(), x.data(), y.data());
      !st)
    return st;
  const float* b = bias.empty() ? nullptr : bias.data();
  auto body = [&](auto g_const) {
    constexpr std::size_t G = decltype(g_const)::value;
    parallel_for(opts.pool, w.n_tiles(), [&](std::size_t t0, std::size_t t1) {
      gemv_q4_exact_tiles<Arch, G>(w, x.data(), b, y.data(), t0, t1);
    });
  };
  switch (w.group_size()) {
    case 32: body(std::integral_constant<std::size_t, 32>{}); break;
    case 64: body(std::integral_constant<std::size_t, 64>{}); break;
    default: body(std::integral_constant<std::size_t, 128>{}); break;
  }
  return {};
}

/// Y = X W^T (+ bias), exact path. X: [m][ldx], Y: [m][ldy] row-major (ldx >= k, ldy >= n;
/// 0 means packed: k and n). Tiles split across opts.pool; bit-identical for every thread count.
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
  const float* b = bias.empty() ? nullptr : bias.data();
  auto body = [&](auto g_const) {
    constexpr std::size_t G = decltype(g_const)::value;
    parallel_for(opts.pool, w.n_tiles(), [&](std::size_t t0, std::size_t t1) {
      gemm_q4_exact_tiles<Arch, G>(w, x.data(), ldx, m, b, y.data(), ldy, t0, t1);
    });
  };
  switch (w.group_size()) {
    case 32: body(std::integral_constant<std::size_t, 32>{}); break;
    case 64: body(std::integral_constant<std::size_t, 64>{}); break;
    default: body(std::integral_constant<std::size_t, 128>{}); break;
  }
  return {};
}

}  // namespace edgellm::kernels
