// SPDX-License-Identifier: Apache-2.0
// RoPE on a Vulkan device, recorded into a CommandSequence (shaders/vulkan/rope.comp): the
// rotate_half convention of kernels::rope with the angles of kernels::rope_tables.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/rope.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace edgellm::backend::vk {

/// In place on v [rows][heads][head_dim] fp32, row t at position first_pos + t:
///   angle = float(first_pos + t) * inv_freq[i]  (fp32, as kernels::rope_tables),
///   v[i] = a cos - b sin, v[i + half] = b cos + a sin  (a = v[i], b = v[i + half], i < half).
/// inv_freq: [head_dim / 2] fp32 (model::rope_inv_freq). head_dim must be even.
/// Accuracy: the shader's own sin / cos are within ~1e-7 of the true values of the fp32 angle
/// for angles below ~2e5 (positions below ~2e5 at inv_freq <= 1); each output is then within
/// about 3e-7 (|a| + |b|) of the CPU's.
class Rope {
 public:
  static result<Rope> create(Device& dev) {
    Rope op;
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 256, 0);
    auto pipe = ComputePipeline::create(dev, "rope", spirv::kRopeSpv, 2, sizeof(Push), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    return op;
  }

  /// Records RoPE on the first `rows` rows of v, positions first_pos, first_pos + 1, ...
  status record(CommandSequence& seq, const Buffer& v, const Buffer& inv_freq, std::size_t rows,
                std::size_t heads, std::size_t head_dim, std::size_t first_pos) const {
    constexpr std::string_view where = "vulkan rope";
    const auto& info = seq.device().info();
    if (rows == 0 || heads == 0)
      return make_error(errc::invalid_argument, where, "rows, heads: must be positive");
    if (head_dim == 0 || head_dim % 2 != 0) {
      return make_error(errc::invalid_argument, where,
                        "head_dim: " + std::to_string(head_dim) + " (must be even and positive)");
    }
    // first_pos + t is converted to fp32 exactly on both sides below 2^24.
    if (first_pos + rows > (std::size_t{1} << 24)) {
      return make_error(errc::out_of_range, where,
                        "first_pos: " + std::to_string(first_pos) + " + rows past 2^24");
    }
    const std::uint64_t count = std::uint64_t{rows} * heads * head_dim;
    if (auto st = require_bytes(v, count * 4, where, "v",
                                "[" + std::to_string(rows) + "][" + std::to_string(heads) + "][" +
                                    std::to_string(head_dim) + "] fp32",
                                info);
        !st)
      return st;
    if (auto st = require_bytes(inv_freq, std::uint64_t{head_dim / 2} * 4, where, "inv_freq",
                                "[" + std::to_string(head_dim / 2) + "] fp32", info);
        !st)
      return st;
    const std::uint32_t wg = pipeline_.workgroup_size();
    auto grid = grid_for(info, (count / 2 + wg - 1) / wg, where, "rows * heads * head_dim / 2");
    if (!grid) return grid.error();
    const Push push{static_cast<std::uint32_t>(rows), static_cast<std::uint32_t>(heads),
                    static_cast<std::uint32_t>(head_dim / 2),
                    static_cast<std::uint32_t>(first_pos)};
    const Buffer* bound[] = {&v, &inv_freq};
    return seq.dispatch(pipeline_, bound, &push, grid->x, grid->y);
  }

  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }

 private:
  struct Push {
    std::uint32_t rows, heads, half_dim, first_pos;
  };
  Rope() = default;
  ComputePipeline pipeline_;
};

}  // namespace edgellm::backend::vk
