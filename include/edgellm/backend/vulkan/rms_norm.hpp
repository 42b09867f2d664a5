// SPDX-License-Identifier: Apache-2.0
// RMSNorm on a Vulkan device, recorded into a CommandSequence (shaders/vulkan/rms_norm.comp):
// rows [r0, r1) of out = x / sqrt(mean(x^2) + eps) * w, kernels::rms_norm's math in fp32.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/rms_norm.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace edgellm::backend::vk {

/// out[r][c] = (x[r][c] * inv) * w[c], inv = 1 / sqrt(sum_c x[r][c]^2 / cols + eps), for rows
/// [r0, r1) of x, out [rows][cols] fp32 (out may be x: in place), w [cols] fp32. Also the
/// per-head norm (Qwen3's q_norm / k_norm): rows = tokens * heads, cols = head_dim.
/// Accuracy: the sum of squares is an fp32 tree sum (the CPU's is in double), relative error
/// about (cols / WG + log2 WG + 3) ulp; each output is then within a few ulp more.
class RmsNorm {
 public:
  static result<RmsNorm> create(Device& dev) {
    RmsNorm op;
    // One float of shared memory per invocation.
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 256, 4);
    auto pipe = ComputePipeline::create(dev, "rms_norm", spirv::kRmsNormSpv, 3, sizeof(Push), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    return op;
  }

  /// Records rows [r0, r1) of out = rmsnorm(x) * w. x, out hold at least r1 rows of cols floats.
  status record(CommandSequence& seq, const Buffer& x, const Buffer& w, const Buffer& out,
                std::size_t cols, std::size_t r0, std::size_t r1, float eps) const {
    constexpr std::string_view where = "vulkan rms_norm";
    const auto& info = seq.device().info();
    if (cols == 0) return make_error(errc::invalid_argument, where, "cols: must be positive");
    if (r0 >= r1) {
      return make_error(errc::invalid_argument, where,
                        "rows: [" + std::to_string(r0) + ", " + std::to_string(r1) + ") is empty");
    }
    if (!(eps >= 0.0f)) return make_error(errc::invalid_argument, where, "eps: must be >= 0");
    const std::string shape = "[" + std::to_string(r1) + "][" + std::to_string(cols) + "] fp32";
    const std::uint64_t bytes = std::uint64_t{r1} * cols * 4;
    if (auto st = require_bytes(x, bytes, where, "x", shape, info); !st) return st;
    if (auto st = require_bytes(out, bytes, where, "out", shape, info); !st) return st;
    if (auto st = require_bytes(w, std::uint64_t{cols} * 4, where, "w",
                                "[" + std::to_string(cols) + "] fp32", info);
        !st)
      return st;
    auto grid = grid_for(info, r1 - r0, where, "rows");
    if (!grid) return grid.error();
    const Push push{static_cast<std::uint32_t>(cols), static_cast<std::uint32_t>(r0),
                    static_cast<std::uint32_t>(r1), eps};
    const Buffer* bound[] = {&x, &w, &out};
    return seq.dispatch(pipeline_, bound, &push, grid->x, grid->y);
  }

  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }

 private:
  struct Push {
    std::uint32_t cols, r0, r1;
    float eps;
  };
  RmsNorm() = default;
  ComputePipeline pipeline_;
};

}  // namespace edgellm::backend::vk
