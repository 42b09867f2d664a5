// SPDX-License-Identifier: Apache-2.0
// y = x W^T on a Vulkan device for one activation row (m = 1, decode), W an int4 (group 32, 64
// or 128) kernels::Q4Matrix uploaded once in its own packed tile layout (shaders/vulkan/gemv_q4.comp).
// run() is one GEMV on the op's own x and y (its own command buffer, recorded once: write x,
// submit, wait, read y); record() adds the same dispatch over the caller's buffers to a
// CommandSequence, for a chain of ops in one submission.
//
// Activations: fp32 (the CPU exact path's math, kernels::reference::gemv_q4) or int8 (W4A8, the
// CPU fast path's math, kernels::reference::gemm_q4_fast): x is first quantised per group of
// G inputs by quantize_q8.comp (bit for bit reference::quantize_activations_q8) into a scratch
// buffer the op owns (one row: k int8 + an fp32 scale and an int32 sum per group), then the
// GEMV sums exact int32 group dots. Where the device reports shaderIntegerDotProduct the dots
// are packed 4x8-bit dot products (gemv_q4_int8_dot.comp), elsewhere plain int multiply-adds
// (gemv_q4_int8.comp), so W4A8 runs on every device; GemvActivations::int8_dot asks for the
// dot build only and is refused where the feature is missing.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/handle.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/gemv_q4.hpp"
#include "edgellm/backend/vulkan/spirv/gemv_q4_int8.hpp"
#include "edgellm/backend/vulkan/spirv/gemv_q4_int8_dot.hpp"
#include "edgellm/backend/vulkan/spirv/gemv_q4_subgroup.hpp"
#include "edgellm/backend/vulkan/spirv/quantize_q8.hpp"
#include "edgellm/kernels/formats.hpp"
#include "edgellm/result.hpp"

namespace edgellm::backend::vk {

/// What the GEMV multiplies the int4 codes with.
enum class GemvActivations {
  fp32,      ///< x as given (the CPU exact path)
  int8,      ///< W4A8: x quantised per group; integer dot products where the device has them
  int8_dot,  ///< W4A8 with integer dot products only: refused where shaderIntegerDotProduct is missing
};

struct GemvQ4Options {
  BufferOptions weights;          ///< the weight buffer's upload path
  std::uint32_t max_groups_x = 0; ///< workgroups along x before the grid goes 2D (0: the device's)
  /// The portable shader even where the device offers subgroup arithmetic (fp32) or integer
  /// dot products (int8: the plain int multiply-add build) (tests compare both).
  bool portable = false;
  GemvActivations activations = GemvActivations::fp32;
};

class GemvQ4 {
 public:
  GemvQ4(GemvQ4&&) noexcept = default;
  GemvQ4& operator=(GemvQ4&& o) noexcept { return move_assign(*this, std::move(o)); }
  GemvQ4(const GemvQ4&) = delete;
  GemvQ4& operator=(const GemvQ4&) = delete;
  ~GemvQ4() { free_commands(); }

  /// Whether a device with `info` can run the options' activations: errc::unsupported naming
  /// shaderIntegerDotProduct for GemvActivations::int8_dot (with `portable` set too, or on a
  /// device without the feature). create() decides by this.
  static status supports(const DeviceInfo& info, const GemvQ4Options& options) {
    if (options.activations != GemvActivations::int8_dot) return {};
    if (options.portable)
      return make_error(errc::unsupported, "vulkan gemv_q4",
                        "options: int8_dot activations with portable set (the portable W4A8 "
                        "build is activations = int8)");
    if (!info.integer_dot_product)
      return make_error(errc::unsupported, "vulkan gemv_q4",
                        "int8_dot activations: the device '" + info.name +
                            "' lacks shaderIntegerDotProduct (Vulkan 1.3 or "
                            "VK_KHR_shader_integer_dot_product); activations = int8 runs the "
                            "same math with plain int multiply-adds");
    return {};
  }

  /// Uploads `w` (group size 32, 64 or 128) to device memory and records the dispatch. The
  /// Device must outlive the op.
  static result<GemvQ4> create(Device& dev, const kernels::Q4Matrix& w,
                               const GemvQ4Options& options = {}) {
    constexpr std::string_view where = "vulkan gemv_q4";
    if (auto st = supports(dev.info(), options); !st) return st.error();
    if (w.empty() || !kernels::is_supported_group_size(w.group_size())) {
      return make_error(errc::unsupported, where,
                        "w: group size " + std::to_string(w.group_size()) +
                            " (the shader takes 32, 64 or 128), or an empty matrix");
    }
    const auto& info = dev.info();
    if (w.byte_size() > info.max_storage_buffer_range) {
      return make_error(errc::unsupported, where,
                        "w: " + std::to_string(w.byte_size()) + " bytes exceed the device's "
                        "maxStorageBufferRange of " + std::to_string(info.max_storage_buffer_range));
    }
    GemvQ4 op;
    op.dev_ = &dev;
    op.n_ = static_cast<std::uint32_t>(w.n());
    op.k_ = static_cast<std::uint32_t>(w.k());
    op.group_ = static_cast<std::uint32_t>(w.group_size());
    // Workgroups (kTilesPerWorkgroup tiles each) over a 2D grid when one dimension's
    // workgroup count is not enough.
    const auto tiles = static_cast<std::uint32_t>(
        (w.n_tiles() + kTilesPerWorkgroup - 1) / kTilesPerWorkgroup);
    const std::uint32_t max_x = options.max_groups_x
                                    ? std::min(options.max_groups_x, info.max_workgroup_count[0])
                                    : info.max_workgroup_count[0];
    op.groups_x_ = std::min(tiles, max_x);
    op.groups_y_ = (tiles + op.groups_x_ - 1) / op.groups_x_;
    if (op.groups_y_ > info.max_workgroup_count[1]) {
      return make_error(errc::unsupported, where, "n: " + std::to_string(w.n()) +
                                                      " rows exceed the device's dispatch limits");
    }
    auto weights = Buffer::create(dev, w.byte_size(), "gemv_q4 weights", options.weights);
    if (!weights) return weights.error();
    op.w_ = std::move(*weights);
    if (auto st = op.w_.write({w.data(), w.byte_size()}); !st) return st.error();
    auto x = Buffer::create(dev, std::size_t{op.k_} * 4, "gemv_q4 x", {BufferKind::host_io});
    if (!x) return x.error();
    op.x_ = std::move(*x);
    auto y = Buffer::create(dev, std::size_t{op.n_} * 4, "gemv_q4 y", {BufferKind::host_io});
    if (!y) return y.error();
    op.y_ = std::move(*y);
    // One invocation per group of the workgroup's tiles, up to 64 (more would leave most of
    // them idle on k of a few thousand); 16 * kTilesPerWorkgroup floats of shared memory each.
    const auto groups = static_cast<std::uint32_t>(w.n_groups());
    const std::uint32_t wg = choose_workgroup_size(
        info, std::min<std::uint32_t>(64, std::bit_ceil(groups)), 16 * kTilesPerWorkgroup * 4);
    op.int8_ = options.activations != GemvActivations::fp32;
    if (op.int8_) {
      // One quantize workgroup per group of x, G / 4 invocations (one output word each).
      if (groups > info.max_workgroup_count[0]) {
        return make_error(errc::unsupported, where,
                          "k: " + std::to_string(groups) + " groups of int8 activations exceed "
                          "the device's maxComputeWorkGroupCount[0]");
      }
      // Integer dot products where the device has them, unless the portable build is asked for.
      op.dot_ = info.integer_dot_product && !options.portable;
      auto pipe = op.dot_ ? ComputePipeline::create(dev, "gemv_q4_int8_dot",
                                                    spirv::kGemvQ4Int8DotSpv, 3,
                                                    sizeof(Int8Push), wg)
                          : ComputePipeline::create(dev, "gemv_q4_int8", spirv::kGemvQ4Int8Spv, 3,
                                                    sizeof(Int8Push), wg);
      if (!pipe) return pipe.error();
      op.pipeline_ = std::move(*pipe);
      auto quantize = ComputePipeline::create(
          dev, "quantize_q8", spirv::kQuantizeQ8Spv, 2, sizeof(QuantizePush),
          choose_workgroup_size(info, op.group_ / 4, 4, std::min<std::uint32_t>(16, op.group_ / 4)));
      if (!quantize) return quantize.error();
      op.quantize_ = std::move(*quantize);
      auto a = Buffer::create(dev, std::size_t{op.k_} + std::size_t{groups} * 8,
                              "gemv_q4 int8 activations");
      if (!a) return a.error();
      op.a_ = std::move(*a);
      const Buffer* qbound[] = {&op.x_, &op.a_};
      if (auto st = op.quantize_.bind(qbound); !st) return st.error();
      const Buffer* bound[] = {&op.w_, &op.a_, &op.y_};
      if (auto st = op.pipeline_.bind(bound); !st) return st.error();
    } else {
      // Subgroup arithmetic where the device has it in compute shaders: the final sum of each
      // row's partials goes through subgroupAdd (gemv_q4_subgroup.comp); else the portable build.
      op.subgroups_ = info.subgroup_arithmetic && !options.portable;
      auto pipe = op.subgroups_
                      ? ComputePipeline::create(dev, "gemv_q4_subgroup", spirv::kGemvQ4SubgroupSpv,
                                                3, sizeof(Push), wg)
                      : ComputePipeline::create(dev, "gemv_q4", spirv::kGemvQ4Spv, 3, sizeof(Push),
                                                wg);
      if (!pipe) return pipe.error();
      op.pipeline_ = std::move(*pipe);
      const Buffer* bound[] = {&op.w_, &op.x_, &op.y_};
      if (auto st = op.pipeline_.bind(bound); !st) return st.error();
    }
    if (auto st = op.record(); !st) return st.error();
    return op;
  }

  /// y[n] = x[k] W^T. Blocks until the device is done.
  status run(std::span<const float> x, std::span<float> y) {
    if (x.size() != k_ || y.size() != n_) {
      return make_error(errc::shape_mismatch, "vulkan gemv_q4",
                        "x: size " + std::to_string(x.size()) + ", y: size " +
                            std::to_string(y.size()) + " for W [" + std::to_string(n_) + ", " +
                            std::to_string(k_) + "]");
    }
    if (auto st = x_.write(std::as_bytes(x)); !st) return st;
    if (auto st = dev_->submit(cmd_, "gemv_q4"); !st) return st;
    return y_.read(std::as_writable_bytes(y));
  }

  /// Records y = x W^T into `seq` over the caller's device buffers: x row x_row of a [..][k]
  /// fp32 buffer, y row y_row of a [..][n] fp32 buffer (one row of a chunk's activations).
  /// Errors name the buffer that is too small; nothing is recorded. With int8 activations two
  /// dispatches (quantize into the op's scratch buffer, then the GEMV; the sequence's barrier
  /// between them), so a sequence may record the op several times but not run two of its
  /// recordings concurrently.
  status record(CommandSequence& seq, const Buffer& x, const Buffer& y, std::size_t x_row = 0,
                std::size_t y_row = 0) const {
    constexpr std::string_view where = "vulkan gemv_q4";
    const auto& info = seq.device().info();
    if (auto st = require_bytes(x, (std::uint64_t{x_row} + 1) * k_ * 4, where, "x",
                                "row " + std::to_string(x_row) + " of [..][" +
                                    std::to_string(k_) + "] fp32",
                                info);
        !st)
      return st;
    if (auto st = require_bytes(y, (std::uint64_t{y_row} + 1) * n_ * 4, where, "y",
                                "row " + std::to_string(y_row) + " of [..][" +
                                    std::to_string(n_) + "] fp32",
                                info);
        !st)
      return st;
    if (int8_) {
      const Buffer* qbound[] = {&x, &a_};
      const QuantizePush qpush{k_ / group_, group_, static_cast<std::uint32_t>(x_row * k_)};
      if (auto st = seq.dispatch(quantize_, qbound, &qpush, k_ / group_); !st) return st;
      const Buffer* bound[] = {&w_, &a_, &y};
      const Int8Push push{n_, k_ / group_, group_ / 8, groups_x_,
                          static_cast<std::uint32_t>(y_row * n_)};
      return seq.dispatch(pipeline_, bound, &push, groups_x_, groups_y_);
    }
    const Buffer* bound[] = {&w_, &x, &y};
    const Push push{n_, k_ / group_, group_ / 8, groups_x_,
                    static_cast<std::uint32_t>(x_row * k_ / 4), static_cast<std::uint32_t>(y_row * n_)};
    return seq.dispatch(pipeline_, bound, &push, groups_x_, groups_y_);
  }

  std::size_t n() const noexcept { return n_; }
  std::size_t k() const noexcept { return k_; }
  std::size_t group_size() const noexcept { return group_; }
  std::size_t weight_bytes() const noexcept { return w_.size(); }  ///< the packed tiles on the device
  /// The packed tiles on the device (GemmQ4::for_shape records over the same buffer).
  const Buffer& weights() const noexcept { return w_; }
  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }
  bool weights_host_visible() const noexcept { return w_.host_visible(); }
  std::uint32_t groups_x() const noexcept { return groups_x_; }  ///< dispatch grid
  /// Which shader build runs: fp32 activations "subgroup" (subgroupAdd in the final sum) or
  /// "portable"; int8 activations "int8-dot" (packed integer dot products) or "int8-portable".
  const char* variant() const noexcept {
    if (int8_) return dot_ ? "int8-dot" : "int8-portable";
    return subgroups_ ? "subgroup" : "portable";
  }
  /// int8 activations: the scratch buffer of the last quantised row (quantize_q8.comp's layout:
  /// [k] int8 codes in input order, then [k / G] fp32 scales, then [k / G] int32 sums).
  /// Empty for fp32 activations.
  const Buffer& quantized_activations() const noexcept { return a_; }
  std::uint32_t groups_y() const noexcept { return groups_y_; }

  /// 16-row weight tiles per workgroup (TR in gemv_q4.comp): the grid has
  /// ceil(n_tiles / kTilesPerWorkgroup) workgroups.
  static constexpr std::uint32_t kTilesPerWorkgroup = 2;

 private:
  struct Push {
    std::uint32_t n, n_groups, blocks, tiles_x, x_offset, y_offset;  // see gemv_q4.comp
  };
  struct Int8Push {
    std::uint32_t n, n_groups, blocks, tiles_x, y_offset;  // see gemv_q4_int8.glsl
  };
  struct QuantizePush {
    std::uint32_t n_groups, group, x_offset;  // see quantize_q8.comp
  };

  GemvQ4() = default;

  void free_commands() noexcept {
    if (cmd_ && dev_)
      dev_->fn().vkFreeCommandBuffers(dev_->handle(), dev_->command_pool(), 1, cmd_.addressof());
    cmd_ = VK_NULL_HANDLE;
  }

  status record() {
    const auto& f = dev_->fn();
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = dev_->command_pool();
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    if (auto r = f.vkAllocateCommandBuffers(dev_->handle(), &ai, cmd_.addressof());
        r != VK_SUCCESS) {
      cmd_ = VK_NULL_HANDLE;
      return vk_error(r, "vulkan gemv_q4", "vkAllocateCommandBuffers");
    }
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    if (auto r = f.vkBeginCommandBuffer(cmd_, &begin); r != VK_SUCCESS)
      return vk_error(r, "vulkan gemv_q4", "vkBeginCommandBuffer");
    // Host writes of x (and uploads) before the shader; the shader's y before the host reads.
    VkMemoryBarrier in{};
    in.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    in.srcAccessMask = VK_ACCESS_HOST_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    in.dstAccessMask = VK_ACCESS_SHADER_READ_BIT;
    f.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &in, 0, nullptr, 0, nullptr);
    if (int8_) {
      const QuantizePush qpush{k_ / group_, group_, 0};
      quantize_.record(cmd_, &qpush, k_ / group_);
      // The quantised row before the GEMV reads it.
      VkMemoryBarrier mid{};
      mid.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
      mid.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      mid.dstAccessMask = VK_ACCESS_SHADER_READ_BIT;
      f.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mid, 0, nullptr, 0,
                             nullptr);
      const Int8Push push{n_, k_ / group_, group_ / 8, groups_x_, 0};
      pipeline_.record(cmd_, &push, groups_x_, groups_y_);
    } else {
      const Push push{n_, k_ / group_, group_ / 8, groups_x_, 0, 0};
      pipeline_.record(cmd_, &push, groups_x_, groups_y_);
    }
    VkMemoryBarrier out{};
    out.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    out.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    out.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    f.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                           0, 1, &out, 0, nullptr, 0, nullptr);
    if (auto r = f.vkEndCommandBuffer(cmd_); r != VK_SUCCESS)
      return vk_error(r, "vulkan gemv_q4", "vkEndCommandBuffer");
    return {};
  }

  Handle<Device*> dev_;
  Buffer w_, x_, y_;  // [n_tiles * n_groups] packed tiles, x [k] fp32, y [n] fp32
  Buffer a_;          // int8 activations: [k] int8, [k / G] fp32 scales, [k / G] int32 sums
  ComputePipeline pipeline_;
  ComputePipeline quantize_;  // int8 activations: x -> a_
  Handle<VkCommandBuffer> cmd_;
  std::uint32_t n_ = 0, k_ = 0, group_ = 128, groups_x_ = 1, groups_y_ = 1;
  bool subgroups_ = false;  // the gemv_q4_subgroup build
  bool int8_ = false;       // int8 activations (quantize_ then a gemv_q4_int8* build)
  bool dot_ = false;        // the gemv_q4_int8_dot build
};

}  // namespace edgellm::backend::vk
