// SPDX-License-Identifier: Apache-2.0
// Helpers of the Vulkan op tests: host-visible buffers filled from host vectors, read back, and
// one op recorded and run in its own CommandSequence.
#pragma once

#include "edgellm/backend/vulkan/buffer.hpp"
#include "edgellm/backend/vulkan/command_sequence.hpp"
#include "edgellm/backend/vulkan/device.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace edgellm::test {

/// A host-visible buffer holding `data` (at least 4 bytes, so empty spans are allowed).
template <class T>
backend::vk::Buffer vk_buffer(backend::vk::Device& dev, std::span<const T> data, std::string name) {
  auto b = backend::vk::Buffer::create(dev, std::max<std::size_t>(data.size_bytes(), 4),
                                       std::move(name), {backend::vk::BufferKind::host_io});
  INFO((b ? std::string() : b.error().message));
  REQUIRE(b);
  if (!data.empty()) REQUIRE(b->write(std::as_bytes(data)));
  return std::move(*b);
}
template <class T>
backend::vk::Buffer vk_buffer(backend::vk::Device& dev, const std::vector<T>& data,
                              std::string name) {
  return vk_buffer(dev, std::span<const T>(data), std::move(name));
}

/// The first `n` values of type T in `b`.
template <class T>
std::vector<T> vk_read(backend::vk::Buffer& b, std::size_t n) {
  std::vector<T> out(n);
  REQUIRE(b.read(std::as_writable_bytes(std::span(out))));
  return out;
}

/// Records what `record(seq)` records into a new sequence, submits it once, and checks both.
template <class F>
void vk_run(backend::vk::Device& dev, F&& record) {
  auto seq = backend::vk::CommandSequence::create(dev, "test");
  REQUIRE(seq);
  const status st = record(*seq);
  INFO((st ? std::string() : st.error().message));
  REQUIRE(st);
  REQUIRE(seq->submit());
}

}  // namespace edgellm::test
