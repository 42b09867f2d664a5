// SPDX-License-Identifier: Apache-2.0
// What every host-memory backend keeps besides its ops: the activation buffers, the RoPE tables
// of the rows being run, and the embedding lookup from a host table. The CPU backend and the
// scalar oracle both hold one, so their bookkeeping cannot drift apart; a device backend keeps
// the same things in device memory instead.
#pragma once

#include "edgellm/backend/backend.hpp"
#include "edgellm/detail/aligned_buffer.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/kernels/elementwise.hpp"
#include "edgellm/result.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace edgellm::backend {

/// An activation [rows][cols] fp32 in host memory: data spans max_batch rows.
struct HostTensor {
  std::span<float> data;
  std::size_t cols = 0;
};

/// Host activations and RoPE tables for one backend instance (see the file comment).
class HostState {
 public:
  HostState() = default;
  /// Errors: out_of_memory for the RoPE tables ([max_batch][head_dim / 2] floats, twice).
  static result<HostState> create(const ModelShape& shape) {
    HostState h;
    h.shape_ = shape;
    // [max_batch][head_dim / 2]: max_batch is the caller's option, so the size is checked.
    const std::size_t n = detail::saturating_bytes(shape.max_batch, shape.head_dim / 2);
    auto cos = detail::try_allocate_aligned<float>(n, kWhere, "RoPE cos table");
    if (!cos) return cos.error();
    auto sin = detail::try_allocate_aligned<float>(n, kWhere, "RoPE sin table");
    if (!sin) return sin.error();
    h.cos_ = std::move(*cos);
    h.sin_ = std::move(*sin);
    h.table_floats_ = n;
    return h;
  }

  const ModelShape& shape() const noexcept { return shape_; }

  /// Floats of the RoPE tables create() allocates (cos and sin, [max_batch][head_dim / 2] each):
  /// the formula the memory plan (plan.hpp) uses.
  static std::size_t rope_table_floats(const ModelShape& shape) noexcept {
    return 2 * shape.max_batch * (shape.head_dim / 2);
  }

  /// A new zeroed activation [max_batch][cols]; its memory stays put until the state dies.
  result<HostTensor> activation(std::size_t cols) {
    const std::size_t n = detail::saturating_bytes(shape_.max_batch, cols);
    auto buf = detail::try_allocate_aligned<float>(
        n, kWhere,
        "activation [" + std::to_string(shape_.max_batch) + ", " + std::to_string(cols) + "]");
    if (!buf) return buf.error();
    if (auto st = detail::try_reserve(buffers_, buffers_.size() + 1, kWhere, "activation list");
        !st)
      return st.error();
    std::fill_n(buf->get(), n, 0.0f);
    HostTensor t{std::span<float>(buf->get(), n), cols};
    buffers_.push_back(std::move(*buf));
    activation_floats_ += n;
    return t;
  }

  /// Fills the RoPE tables for positions first_pos .. first_pos + rows - 1 (HF's fp32 angles,
  /// the specification both backends use).
  status begin(std::size_t first_pos, std::size_t rows) {
    if (rows > shape_.max_batch) {
      return make_error(errc::invalid_argument, "backend::HostState::begin",
                        "rows: " + std::to_string(rows) + " > max_batch " +
                            std::to_string(shape_.max_batch));
    }
    kernels::rope_tables(shape_.rope_inv_freq.data(), shape_.head_dim / 2, first_pos, rows,
                         cos_.get(), sin_.get());
    return {};
  }

  /// x[t] = table row ids[t] (ids are checked against the vocabulary by the Transformer).
  static status embed(const kernels::DenseMatrix& table, std::span<const std::int32_t> ids,
                      HostTensor x) {
    for (std::size_t t = 0; t < ids.size(); ++t)
      table.lookup(static_cast<std::size_t>(ids[t]), x.data.data() + t * x.cols);
    return {};
  }

  /// cos / sin [rows][head_dim / 2] of the rows begin() was given.
  const float* cos() const noexcept { return cos_.get(); }
  const float* sin() const noexcept { return sin_.get(); }

  /// Activations and RoPE tables.
  std::size_t bytes() const noexcept {
    return (activation_floats_ + 2 * table_floats_) * sizeof(float);
  }

 private:
  static constexpr std::string_view kWhere = "backend::HostState";

  ModelShape shape_;
  std::vector<detail::AlignedArray<float>> buffers_;  // activations, [max_batch][cols] each
  detail::AlignedArray<float> cos_, sin_;             // [max_batch][head_dim / 2]
  std::size_t activation_floats_ = 0;
  std::size_t table_floats_ = 0;
};

}  // namespace edgellm::backend
