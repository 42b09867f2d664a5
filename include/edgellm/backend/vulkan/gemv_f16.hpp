// SPDX-License-Identifier: Apache-2.0
// y = x W^T on a Vulkan device for a dense fp16 W (the lm_head, or a tied embedding) and a few
// activation rows, recorded into a CommandSequence (shaders/vulkan/gemv_f16.comp).
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/dense_buffer.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/gemv_f16.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace edgellm::backend::vk {

/// The shape of one y = x W^T: W [n][k] fp16 (upload_dense of an f16 kernels::DenseMatrix),
/// x rows [x_row, x_row + m) of a [..][k] fp32 buffer, written to rows [y_row, y_row + m) of a
/// [..][n] fp32 buffer.
struct GemvF16Shape {
  std::size_t n = 0, k = 0, m = 1;
  std::size_t x_row = 0, y_row = 0;
};

/// y[j][r] = sum_c x[j][c] W[r][c], fp16 W decoded exactly, fp32 products and sums (error within
/// 2 k u sum_c |x w| of reference::dense_matmul_rows, whose own bound is (k + 1) u sum |x w|).
/// Up to 8 rows of x per dispatch; record() splits larger m into several dispatches.
class GemvF16 {
 public:
  static constexpr std::size_t max_m_per_dispatch = 8;  // MAX_M of the shader

  static result<GemvF16> create(Device& dev) {
    GemvF16 op;
    // max_m_per_dispatch floats of shared memory per invocation.
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 128, 4 * max_m_per_dispatch);
    auto pipe = ComputePipeline::create(dev, "gemv_f16", spirv::kGemvF16Spv, 3, sizeof(Push), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    return op;
  }

  /// Records y = x W^T for `shape`. Errors name the argument: sizes, or a buffer too small.
  status record(CommandSequence& seq, const Buffer& w, const Buffer& x, const Buffer& y,
                const GemvF16Shape& shape) const {
    constexpr std::string_view where = "vulkan gemv_f16";
    const auto& info = seq.device().info();
    const auto& [n, k, m, x_row, y_row] = shape;
    if (n == 0 || k == 0 || m == 0) {
      return make_error(errc::invalid_argument, where,
                        "shape: n " + std::to_string(n) + ", k " + std::to_string(k) + ", m " +
                            std::to_string(m) + " (all must be positive)");
    }
    if (auto st =
            require_bytes(w, dense_buffer_bytes(kernels::DenseType::f16, n, k), where, "w",
                          "[" + std::to_string(n) + "][" + std::to_string(k) + "] fp16", info);
        !st)
      return st;
    if (auto st =
            require_bytes(x, (std::uint64_t{x_row} + m) * k * 4, where, "x",
                          "rows [" + std::to_string(x_row) + ", " + std::to_string(x_row + m) +
                              ") of [..][" + std::to_string(k) + "] fp32",
                          info);
        !st)
      return st;
    if (auto st =
            require_bytes(y, (std::uint64_t{y_row} + m) * n * 4, where, "y",
                          "rows [" + std::to_string(y_row) + ", " + std::to_string(y_row + m) +
                              ") of [..][" + std::to_string(n) + "] fp32",
                          info);
        !st)
      return st;
    auto grid = grid_for(info, n, where, "n");
    if (!grid) return grid.error();
    const Buffer* bound[] = {&w, &x, &y};
    for (std::size_t j = 0; j < m; j += max_m_per_dispatch) {
      const std::size_t rows = std::min(max_m_per_dispatch, m - j);
      const Push push{static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(k),
                      static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>((x_row + j) * k),
                      static_cast<std::uint32_t>((y_row + j) * n)};
      if (auto st = seq.dispatch(pipeline_, bound, &push, grid->x, grid->y); !st) return st;
    }
    return {};
  }

  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }

 private:
  struct Push {
    std::uint32_t n, k, m, x_offset, y_offset;
  };
  GemvF16() = default;
  ComputePipeline pipeline_;
};

}  // namespace edgellm::backend::vk
