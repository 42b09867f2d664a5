// SPDX-License-Identifier: Apache-2.0
// The embedding lookup on a Vulkan device, recorded into a CommandSequence
// (shaders/vulkan/embed.comp): rows of a kernels::DenseMatrix table (fp32, fp16 or bf16, as
// upload_dense stores it) to fp32 activations.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/dense_buffer.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/embed.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace edgellm::backend::vk {

static_assert(static_cast<int>(kernels::DenseType::f32) == 0 &&
                  static_cast<int>(kernels::DenseType::f16) == 1 &&
                  static_cast<int>(kernels::DenseType::bf16) == 2,
              "embed.comp reads the table type as DenseType's value");

/// The table a record() reads: its element type and shape [n_rows][cols].
struct EmbedTable {
  kernels::DenseType type = kernels::DenseType::f16;
  std::size_t n_rows = 0, cols = 0;
};

/// out[t][c] = table[ids[t]][c] as fp32 (exactly kernels::DenseMatrix::row's values) for
/// t < count; ids [count] int32, out [count][cols] fp32. The ids live on the device (written by
/// the host or by an earlier argmax), so they are checked there: an id outside [0, n_rows)
/// gives a row of NaN rather than a read out of bounds. check_ids() names a bad host id first.
class Embed {
 public:
  static result<Embed> create(Device& dev) {
    Embed op;
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 256, 0);
    auto pipe = ComputePipeline::create(dev, "embed", spirv::kEmbedSpv, 3, sizeof(Push), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    return op;
  }

  /// Host-side check of ids before they are written to the device: errc::out_of_range naming
  /// the first id outside [0, n_rows).
  static status check_ids(std::span<const std::int32_t> ids, std::size_t n_rows) {
    for (std::size_t t = 0; t < ids.size(); ++t) {
      if (ids[t] < 0 || static_cast<std::size_t>(ids[t]) >= n_rows) {
        return make_error(errc::out_of_range, "vulkan embed",
                          "ids[" + std::to_string(t) + "]: " + std::to_string(ids[t]) +
                              " outside the table's " + std::to_string(n_rows) + " rows");
      }
    }
    return {};
  }

  /// Records out[t] = table[ids[t]] for t < count.
  status record(CommandSequence& seq, const Buffer& table, const EmbedTable& shape,
                const Buffer& ids, const Buffer& out, std::size_t count) const {
    constexpr std::string_view where = "vulkan embed";
    const auto& info = seq.device().info();
    if (shape.n_rows == 0 || shape.cols == 0 || count == 0) {
      return make_error(errc::invalid_argument, where,
                        "table [" + std::to_string(shape.n_rows) + "][" +
                            std::to_string(shape.cols) + "], count " + std::to_string(count) +
                            " (all must be positive)");
    }
    if (auto st = require_bytes(table, dense_buffer_bytes(shape.type, shape.n_rows, shape.cols),
                                where, "table",
                                "[" + std::to_string(shape.n_rows) + "][" +
                                    std::to_string(shape.cols) + "] " + to_string(shape.type),
                                info);
        !st)
      return st;
    if (auto st = require_bytes(ids, std::uint64_t{count} * 4, where, "ids",
                                "[" + std::to_string(count) + "] int32", info);
        !st)
      return st;
    const std::uint64_t values = std::uint64_t{count} * shape.cols;
    if (auto st = require_bytes(
            out, values * 4, where, "out",
            "[" + std::to_string(count) + "][" + std::to_string(shape.cols) + "] fp32", info);
        !st)
      return st;
    const std::uint32_t wg = pipeline_.workgroup_size();
    auto grid = grid_for(info, (values + wg - 1) / wg, where, "count * cols");
    if (!grid) return grid.error();
    const Push push{static_cast<std::uint32_t>(shape.cols), static_cast<std::uint32_t>(count),
                    static_cast<std::uint32_t>(shape.n_rows),
                    static_cast<std::uint32_t>(shape.type)};
    const Buffer* bound[] = {&table, &ids, &out};
    return seq.dispatch(pipeline_, bound, &push, grid->x, grid->y);
  }

  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }

 private:
  struct Push {
    std::uint32_t cols, count, n_rows, type;  // type: kernels::DenseType's value
  };
  Embed() = default;
  ComputePipeline pipeline_;
};

}  // namespace edgellm::backend::vk
