// SPDX-License-Identifier: Apache-2.0
// The elementwise ops of a decoder layer on a Vulkan device, recorded into a CommandSequence:
// SiluMul (g = silu(g) * u) and Add (x += y, the residual), over count fp32 values each
// (shaders/vulkan/silu_mul.comp, add.comp; the CPU's are kernels::silu_mul / kernels::add), and
// AddBias (a linear's bias on each row of its output, shaders/vulkan/add_bias.comp).
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/add.hpp"
#include "edgellm/backend/vulkan/spirv/add_bias.hpp"
#include "edgellm/backend/vulkan/spirv/silu_mul.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace edgellm::backend::vk {

namespace detail {

/// A two-buffer elementwise op over `count` fp32 values: binding 0 read-write (the output),
/// binding 1 read. One invocation per value, a 2D grid of workgroups.
class ElementwiseOp {
 public:
  static result<ElementwiseOp> create(Device& dev, std::string_view name,
                                      std::span<const std::uint32_t> spirv) {
    ElementwiseOp op;
    op.name_ = "vulkan " + std::string(name);
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 256, 0);
    auto pipe = ComputePipeline::create(dev, name, spirv, 2, sizeof(std::uint32_t), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    return op;
  }

  status record(CommandSequence& seq, const Buffer& out, const Buffer& in, std::size_t count,
                std::string_view out_arg, std::string_view in_arg) const {
    const auto& info = seq.device().info();
    if (count == 0) return make_error(errc::invalid_argument, name_, "count: must be positive");
    const std::string what = "[" + std::to_string(count) + "] fp32";
    if (auto st = require_bytes(out, std::uint64_t{count} * 4, name_, out_arg, what, info); !st)
      return st;
    if (auto st = require_bytes(in, std::uint64_t{count} * 4, name_, in_arg, what, info); !st)
      return st;
    const std::uint32_t wg = pipeline_.workgroup_size();
    auto grid = grid_for(info, (std::uint64_t{count} + wg - 1) / wg, name_, "count");
    if (!grid) return grid.error();
    const auto push = static_cast<std::uint32_t>(count);
    const Buffer* bound[] = {&out, &in};
    return seq.dispatch(pipeline_, bound, &push, grid->x, grid->y);
  }

  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }

 private:
  ComputePipeline pipeline_;
  std::string name_;
};

}  // namespace detail

/// g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < count, fp32.
/// Accuracy: Vulkan's exp is within 3 + 2|x| ulp and division within 2.5 ulp, so each result is
/// within about (8 + 2|g|) ulp of the exact value (g < -88.7 gives the exact limit -0).
class SiluMul {
 public:
  static result<SiluMul> create(Device& dev) {
    auto op = detail::ElementwiseOp::create(dev, "silu_mul", spirv::kSiluMulSpv);
    if (!op) return op.error();
    return SiluMul(std::move(*op));
  }
  /// Records g = silu(g) * u over g, u [count] fp32 (rows * cols of two activations).
  status record(CommandSequence& seq, const Buffer& g, const Buffer& u, std::size_t count) const {
    return op_.record(seq, g, u, count, "g", "u");
  }
  std::uint32_t workgroup_size() const noexcept { return op_.workgroup_size(); }

 private:
  explicit SiluMul(detail::ElementwiseOp op) : op_(std::move(op)) {}
  detail::ElementwiseOp op_;
};

/// x[i] += y[i] for i < count, fp32 (exact: one rounded addition, as on the CPU).
class Add {
 public:
  static result<Add> create(Device& dev) {
    auto op = detail::ElementwiseOp::create(dev, "add", spirv::kAddSpv);
    if (!op) return op.error();
    return Add(std::move(*op));
  }
  /// Records x += y over x, y [count] fp32.
  status record(CommandSequence& seq, const Buffer& x, const Buffer& y, std::size_t count) const {
    return op_.record(seq, x, y, count, "x", "y");
  }
  std::uint32_t workgroup_size() const noexcept { return op_.workgroup_size(); }

 private:
  explicit Add(detail::ElementwiseOp op) : op_(std::move(op)) {}
  detail::ElementwiseOp op_;
};

/// x[r][c] += b[c] for rows [0, rows): a linear's bias on each output row, exact fp32 adds.
class AddBias {
 public:
  static result<AddBias> create(Device& dev) {
    AddBias op;
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 256, 0);
    auto pipe = ComputePipeline::create(dev, "add_bias", spirv::kAddBiasSpv, 2, sizeof(Push), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    return op;
  }

  /// Records x[r][c] += b[c]: x [rows][cols], b [cols] fp32. Errors name the argument.
  status record(CommandSequence& seq, const Buffer& x, const Buffer& b, std::size_t rows,
                std::size_t cols) const {
    constexpr std::string_view where = "vulkan add_bias";
    const auto& info = seq.device().info();
    if (rows == 0 || cols == 0) {
      return make_error(errc::invalid_argument, where,
                        "rows x cols: " + std::to_string(rows) + " x " + std::to_string(cols) +
                            " (both must be positive)");
    }
    const std::uint64_t count = std::uint64_t{rows} * cols;
    if (count > 0xFFFFFFFFu) {
      return make_error(errc::unsupported, where,
                        "rows x cols: " + std::to_string(count) + " elements exceed 2^32");
    }
    if (auto st = require_bytes(x, count * 4, where, "x",
                                "[" + std::to_string(rows) + "][" + std::to_string(cols) + "] fp32",
                                info);
        !st)
      return st;
    if (auto st = require_bytes(b, std::uint64_t{cols} * 4, where, "b",
                                "[" + std::to_string(cols) + "] fp32", info);
        !st)
      return st;
    const std::uint32_t wg = pipeline_.workgroup_size();
    auto grid = grid_for(info, (count + wg - 1) / wg, where, "rows x cols");
    if (!grid) return grid.error();
    const Push push{static_cast<std::uint32_t>(count), static_cast<std::uint32_t>(cols)};
    const Buffer* bound[] = {&x, &b};
    return seq.dispatch(pipeline_, bound, &push, grid->x, grid->y);
  }

 private:
  struct Push {
    std::uint32_t count, cols;
  };
  AddBias() = default;
  ComputePipeline pipeline_;
};

}  // namespace edgellm::backend::vk
