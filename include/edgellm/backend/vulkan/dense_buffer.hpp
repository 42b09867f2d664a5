// SPDX-License-Identifier: Apache-2.0
// A kernels::DenseMatrix (fp32 / fp16 / bf16, row-major [n][k]) in a Vulkan buffer, byte for
// byte: the layout the embed and gemv_f16 shaders read as 32-bit words.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/device.hpp"
#include "edgellm/kernels/dense_matrix.hpp"
#include "edgellm/result.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace edgellm::backend::vk {

/// Bytes of a [n][k] dense matrix of `type` in a device buffer: n * k elements, rounded up to
/// whole 32-bit words (shaders read words; the padding keeps the last one inside the buffer).
constexpr std::uint64_t dense_buffer_bytes(kernels::DenseType type, std::size_t n,
                                           std::size_t k) noexcept {
  const std::uint64_t bytes = std::uint64_t{n} * k * kernels::dense_element_size(type);
  return (bytes + 3) / 4 * 4;
}

/// Uploads `m` to a new buffer of dense_buffer_bytes() (the padding zeroed). `name` is for
/// messages.
inline result<Buffer> upload_dense(Device& dev, const kernels::DenseMatrix& m, std::string name,
                                   const BufferOptions& options = {}) {
  if (m.empty()) {
    return make_error(errc::invalid_argument, "vulkan upload_dense", name + ": an empty matrix");
  }
  const std::size_t bytes = m.n() * m.k() * m.element_size();
  const auto padded = static_cast<std::size_t>(dense_buffer_bytes(m.type(), m.n(), m.k()));
  auto buf = Buffer::create(dev, padded, std::move(name), options);
  if (!buf) return buf.error();
  if (auto st = buf->write({m.data(), bytes}); !st) return st.error();
  if (padded > bytes) {
    const std::byte zero[4] = {};
    if (auto st = buf->write({zero, padded - bytes}, bytes); !st) return st.error();
  }
  return buf;
}

}  // namespace edgellm::backend::vk
