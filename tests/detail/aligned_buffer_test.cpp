// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/detail/aligned_buffer.hpp: alignment for each MemoryUse, typed arrays,
// zero-size requests and moves.
#include "edgellm/detail/aligned_buffer.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace {
namespace d = edgellm::detail;
bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }
}  // namespace

TEST_CASE("allocate_aligned: 64-byte alignment, 2 MiB for large streamed buffers", "[detail]") {
  auto small = d::allocate_aligned(100);
  REQUIRE(small);
  CHECK(aligned(small.get(), 64));
  std::memset(small.get(), 1, 100);

  auto none = d::allocate_aligned(0);  // one byte, still a valid pointer
  CHECK(none);

  auto floats = d::allocate_aligned<float>(1000);
  REQUIRE(floats);
  CHECK(aligned(floats.get(), 64));
  floats[999] = 1.0f;
  CHECK(floats.get_deleter().align == 64);

  auto plain_big = d::allocate_aligned(std::size_t{8} << 20);
  REQUIRE(plain_big);
  CHECK(plain_big.get_deleter().align == 64);

  auto streamed_small = d::allocate_aligned(std::size_t{1} << 20, d::MemoryUse::streamed);
  REQUIRE(streamed_small);
  CHECK(streamed_small.get_deleter().align == 64);

  auto streamed = d::allocate_aligned(std::size_t{4} << 20, d::MemoryUse::streamed);
  REQUIRE(streamed);
  CHECK(aligned(streamed.get(), std::size_t{2} << 20));
  CHECK(streamed.get_deleter().align == (std::size_t{2} << 20));
  streamed[(std::size_t{4} << 20) - 1] = std::byte{7};

  d::AlignedBuffer moved = std::move(streamed);
  CHECK(moved.get_deleter().align == (std::size_t{2} << 20));
  CHECK_FALSE(streamed);
}
