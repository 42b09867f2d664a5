// SPDX-License-Identifier: Apache-2.0
// Y = X W^T on a Vulkan device for m activation rows (prefill), W an int4 (group 32, 64 or 128)
// kernels::Q4Matrix uploaded once in its own packed tile layout, the one gemv_q4 reads
// (shaders/vulkan/gemm_q4.comp). fp32 accumulation, the math of kernels::reference::gemm_q4.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/gemm_q4.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace edgellm::backend::vk {

/// The int4 GEMM op: weights uploaded at create(), host-visible x [max_m][k] and y [max_m][n]
/// fp32 buffers; run() writes x, records and submits one dispatch, waits and reads y. record()
/// instead adds the dispatch over the caller's device buffers to a CommandSequence.
/// Per output: sum over groups of s * sum_c (q_c - z) x_c in fp32 (a running sum per group, then
/// one over the group results, split over the workgroup and added in a tree), within the exact
/// kernels' tolerance (tests/support/q4_fixtures.hpp: (G + n_groups + 4) u sum |w x|).
/// Move-only; the Device must outlive it.
class GemmQ4 {
 public:
  /// Activation rows per workgroup (the shader's MT): each weight tile is read ceil(m / 8) times.
  static constexpr std::size_t kRowsPerWorkgroup = 8;

  /// Uploads `w` (group size 32, 64 or 128) and allocates x and y for up to `max_m` rows.
  static result<GemmQ4> create(Device& dev, const kernels::Q4Matrix& w, std::size_t max_m,
                               const BufferOptions& weights = {}) {
    constexpr std::string_view where = "vulkan gemm_q4";
    if (w.empty()) return make_error(errc::invalid_argument, where, "w: an empty matrix");
    if (w.byte_size() > dev.info().max_storage_buffer_range) {
      return make_error(errc::unsupported, where,
                        "w: " + std::to_string(w.byte_size()) +
                            " bytes exceed the device's maxStorageBufferRange of " +
                            std::to_string(dev.info().max_storage_buffer_range));
    }
    auto op = for_shape(dev, w.n(), w.k(), w.group_size(), max_m);
    if (!op) return op.error();
    auto wb = Buffer::create(dev, w.byte_size(), "gemm_q4 weights", weights);
    if (!wb) return wb.error();
    op->w_ = std::move(*wb);
    if (auto st = op->w_.write({w.data(), w.byte_size()}); !st) return st.error();
    auto x = Buffer::create(dev, max_m * op->k_ * 4, "gemm_q4 x", {BufferKind::host_io});
    if (!x) return x.error();
    op->x_ = std::move(*x);
    auto y = Buffer::create(dev, max_m * op->n_ * 4, "gemm_q4 y", {BufferKind::host_io});
    if (!y) return y.error();
    op->y_ = std::move(*y);
    const Buffer* bound[] = {&op->w_, &op->x_, &op->y_};
    if (auto st = op->pipeline_.bind(bound); !st) return st.error();
    return op;
  }

  /// The pipeline alone, for W [n][k] in groups of `group` (32, 64 or 128; k a multiple of it)
  /// uploaded elsewhere (GemvQ4's weights: the same tiles serve both): record(seq, w, x, y, m).
  static result<GemmQ4> for_shape(Device& dev, std::size_t n, std::size_t k, std::size_t group,
                                  std::size_t max_m) {
    constexpr std::string_view where = "vulkan gemm_q4";
    if (!kernels::is_supported_group_size(group)) {
      return make_error(errc::unsupported, where,
                        "w: group size " + std::to_string(group) +
                            " (the shader takes 32, 64 or 128)");
    }
    if (n == 0 || k == 0 || k % group != 0) {
      return make_error(errc::invalid_argument, where,
                        "w: [" + std::to_string(n) + ", " + std::to_string(k) +
                            "] (k must be a positive multiple of the group size " +
                            std::to_string(group) + ")");
    }
    if (max_m == 0) return make_error(errc::invalid_argument, where, "max_m: must be positive");
    const auto& info = dev.info();
    if (max_m > info.max_storage_buffer_range / (4 * std::max(n, k))) {
      return make_error(errc::unsupported, where,
                        "max_m: " + std::to_string(max_m) + " rows of activations exceed the "
                        "device's maxStorageBufferRange of " +
                            std::to_string(info.max_storage_buffer_range) + " bytes");
    }
    const std::size_t tiles = (n + 15) / 16;
    if (tiles > info.max_workgroup_count[0] ||
        (max_m + kRowsPerWorkgroup - 1) / kRowsPerWorkgroup > info.max_workgroup_count[1]) {
      return make_error(errc::unsupported, where,
                        "w or max_m: " + std::to_string(n) + " rows x " + std::to_string(max_m) +
                            " activation rows exceed the device's dispatch limits");
    }
    GemmQ4 op;
    op.dev_ = &dev;
    op.n_ = n;
    op.k_ = k;
    op.group_ = group;
    op.max_m_ = max_m;
    op.tiles_ = static_cast<std::uint32_t>(tiles);
    // 16 invocations per group in flight, up to 256; 8 floats of shared memory each.
    const auto groups = static_cast<std::uint32_t>(k / group);
    const std::uint32_t wg = choose_workgroup_size(
        info, std::min<std::uint32_t>(256, 16 * std::bit_ceil(groups)), 4 * kRowsPerWorkgroup);
    auto pipe = ComputePipeline::create(dev, "gemm_q4", spirv::kGemmQ4Spv, 3, sizeof(Push), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    return op;
  }

  /// y[m][n] = x[m][k] W^T, 1 <= m <= max_m. Blocks until the device is done.
  status run(std::span<const float> x, std::span<float> y, std::size_t m) {
    if (m == 0 || m > max_m_ || x.size() != m * k_ || y.size() != m * n_) {
      return make_error(errc::shape_mismatch, "vulkan gemm_q4",
                        "m: " + std::to_string(m) + " (max " + std::to_string(max_m_) +
                            "), x: size " + std::to_string(x.size()) + ", y: size " +
                            std::to_string(y.size()) + " for W [" + std::to_string(n_) + ", " +
                            std::to_string(k_) + "]");
    }
    if (auto st = x_.write(std::as_bytes(x)); !st) return st;
    const auto& f = dev_->fn();
    auto st = dev_->submit_and_wait(
        [&](VkCommandBuffer cmd) {
          // Uploads (transfer) before the shader; the shader's y before the host reads.
          VkMemoryBarrier in{};
          in.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
          in.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
          in.dstAccessMask = VK_ACCESS_SHADER_READ_BIT;
          f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                 VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &in, 0, nullptr, 0,
                                 nullptr);
          const Push push{static_cast<std::uint32_t>(n_), static_cast<std::uint32_t>(k_ / group_),
                          static_cast<std::uint32_t>(group_ / 8), static_cast<std::uint32_t>(m)};
          pipeline_.record(
              cmd, &push, tiles_,
              static_cast<std::uint32_t>((m + kRowsPerWorkgroup - 1) / kRowsPerWorkgroup));
          VkMemoryBarrier out{};
          out.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
          out.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
          out.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
          f.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                 VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &out, 0, nullptr, 0, nullptr);
        },
        "gemm_q4");
    if (!st) return st;
    return y_.read(std::as_writable_bytes(y));
  }

  /// Records y[m][n] = x[m][k] W^T over device buffers (fp32, at least m rows each) into a
  /// CommandSequence: the prefill step's form. Errors name the argument; nothing is recorded.
  status record(CommandSequence& seq, const Buffer& x, const Buffer& y, std::size_t m) const {
    return record(seq, w_, x, y, m);
  }

  /// The same over weights `w` of this op's shape uploaded elsewhere (for_shape()).
  status record(CommandSequence& seq, const Buffer& w, const Buffer& x, const Buffer& y,
                std::size_t m) const {
    constexpr std::string_view where = "vulkan gemm_q4";
    const auto& winfo = seq.device().info();
    if (auto st = require_bytes(w, std::uint64_t{tiles_} * (k_ / group_) * kernels::q4_tile_bytes(group_),
                                where, "w",
                                "[" + std::to_string(n_) + ", " + std::to_string(k_) +
                                    "] int4 tiles",
                                winfo);
        !st)
      return st;
    const auto& info = seq.device().info();
    if (m == 0) return make_error(errc::invalid_argument, where, "m: must be positive");
    const std::uint64_t y_groups = (m + kRowsPerWorkgroup - 1) / kRowsPerWorkgroup;
    if (y_groups > info.max_workgroup_count[1]) {
      return make_error(errc::unsupported, where,
                        "m: " + std::to_string(m) + " rows exceed the device's dispatch limits");
    }
    const auto shape = [&](std::size_t cols) {
      return "[" + std::to_string(m) + "][" + std::to_string(cols) + "] fp32";
    };
    if (auto st = require_bytes(x, std::uint64_t{m} * k_ * 4, where, "x", shape(k_), info); !st)
      return st;
    if (auto st = require_bytes(y, std::uint64_t{m} * n_ * 4, where, "y", shape(n_), info); !st)
      return st;
    const Push push{static_cast<std::uint32_t>(n_), static_cast<std::uint32_t>(k_ / group_),
                    static_cast<std::uint32_t>(group_ / 8), static_cast<std::uint32_t>(m)};
    const Buffer* bound[] = {&w, &x, &y};
    return seq.dispatch(pipeline_, bound, &push, tiles_, static_cast<std::uint32_t>(y_groups));
  }

  std::size_t max_m() const noexcept { return max_m_; }
  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }

 private:
  struct Push {
    std::uint32_t n, n_groups, blocks, m;  // see gemm_q4.comp
  };
  GemmQ4() = default;

  Device* dev_ = nullptr;
  Buffer w_, x_, y_;  // [n_tiles * n_groups] packed tiles, x [max_m][k], y [max_m][n] fp32
  ComputePipeline pipeline_;
  std::size_t n_ = 0, k_ = 0, group_ = 128, max_m_ = 0;
  std::uint32_t tiles_ = 0;
};

}  // namespace edgellm::backend::vk
