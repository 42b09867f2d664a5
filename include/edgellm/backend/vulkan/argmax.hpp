// SPDX-License-Identifier: Apache-2.0
// Greedy decoding on a Vulkan device: the index of the largest logit of each row, recorded into a
// CommandSequence (shaders/vulkan/argmax.comp), so a decode step reads back one uint32 per row
// instead of vocab floats.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/backend/vulkan/pipeline.hpp"
#include "edgellm/backend/vulkan/spirv/argmax.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace edgellm::backend::vk {

/// out[r] = the lowest index i of the largest x[r][i], i < n, for rows r < rows of x [rows][n]
/// fp32; out [rows] uint32. Exact (floats are compared as ordered integer keys): ties go to the
/// lowest index, -0 equals +0, -inf is an ordinary value. NaN or +inf anywhere in a row gives
/// out[r] = n, "no answer", as decode::Sampler's greedy path (which then reports the broken
/// logits). Two dispatches: per-chunk maxima into the op's own scratch, then one workgroup per
/// row; the scratch is reused by every record() of this op, which the sequence's barriers make
/// safe.
class Argmax {
 public:
  /// `max_rows`: the most rows one record() may take (scratch: max_rows * WG * 8 bytes).
  static result<Argmax> create(Device& dev, std::size_t max_rows = 8) {
    constexpr std::string_view where = "vulkan argmax";
    if (max_rows == 0 || max_rows > dev.info().max_workgroup_count[1]) {
      return make_error(
          errc::invalid_argument, where,
          "max_rows: " + std::to_string(max_rows) + " (1 .. maxComputeWorkGroupCount[1])");
    }
    Argmax op;
    op.max_rows_ = max_rows;
    // A key and an index of shared memory per invocation.
    const std::uint32_t wg = choose_workgroup_size(dev.info(), 256, 8);
    auto pipe = ComputePipeline::create(dev, "argmax", spirv::kArgmaxSpv, 3, sizeof(Push), wg);
    if (!pipe) return pipe.error();
    op.pipeline_ = std::move(*pipe);
    auto scratch = Buffer::create(dev, max_rows * wg * 8, "argmax partial maxima");
    if (!scratch) return scratch.error();
    op.scratch_ = std::move(*scratch);
    return op;
  }

  /// Records out[r] = argmax(x[r][0 .. n)) for r < rows.
  status record(CommandSequence& seq, const Buffer& x, const Buffer& out, std::size_t n,
                std::size_t rows = 1) const {
    constexpr std::string_view where = "vulkan argmax";
    const auto& info = seq.device().info();
    if (n == 0) return make_error(errc::invalid_argument, where, "n: must be positive");
    if (rows == 0 || rows > max_rows_) {
      return make_error(
          errc::invalid_argument, where,
          "rows: " + std::to_string(rows) + " (1 .. max_rows = " + std::to_string(max_rows_) + ")");
    }
    if (auto st =
            require_bytes(x, std::uint64_t{rows} * n * 4, where, "x",
                          "[" + std::to_string(rows) + "][" + std::to_string(n) + "] fp32", info);
        !st)
      return st;
    if (auto st = require_bytes(out, std::uint64_t{rows} * 4, where, "out",
                                "[" + std::to_string(rows) + "] uint32", info);
        !st)
      return st;
    // At most WG chunks (so pass 1 is one workgroup per row), each of >= 4 WG elements when n
    // allows (so a pass-0 invocation reads several).
    const std::uint64_t wg = pipeline_.workgroup_size();
    const std::uint64_t want = std::min<std::uint64_t>((n + 4 * wg - 1) / (4 * wg), wg);
    const std::uint64_t chunk = (n + want - 1) / want;
    const std::uint64_t groups = (n + chunk - 1) / chunk;  // every chunk non-empty
    const Buffer* bound[] = {&x, &scratch_, &out};
    const auto r = static_cast<std::uint32_t>(rows);
    Push push{static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(groups),
              static_cast<std::uint32_t>(chunk), 0};
    if (auto st = seq.dispatch(pipeline_, bound, &push, push.groups, r); !st) return st;
    push.pass = 1;
    return seq.dispatch(pipeline_, bound, &push, 1, r);
  }

  std::uint32_t workgroup_size() const noexcept { return pipeline_.workgroup_size(); }
  std::size_t max_rows() const noexcept { return max_rows_; }

 private:
  struct Push {
    std::uint32_t n, groups, chunk, pass;
  };
  Argmax() = default;
  ComputePipeline pipeline_;
  Buffer scratch_;  // [max_rows][WG] (key, index) pairs
  std::size_t max_rows_ = 0;
};

}  // namespace edgellm::backend::vk
