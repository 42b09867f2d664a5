// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/detail/aligned_buffer.hpp: alignment for each MemoryUse, typed arrays,
// zero-size requests and moves; allocation failures as errc::out_of_memory (try_resize,
// try_allocate_aligned).
#include "edgellm/detail/aligned_buffer.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace test_detail_aligned_buffer {

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

TEST_CASE("try_resize / try_allocate_aligned: a failed allocation is an error naming it",
          "[detail]") {
  using edgellm::errc;
  using Catch::Matchers::Contains;
  std::vector<std::uint64_t> v(3, 7);
  // 2^60 elements (2^63 bytes): more than max_size, refused before allocating.
  auto st = d::try_resize(v, std::size_t{1} << 60, "test", "huge table");
  REQUIRE_FALSE(st);
  CHECK(st.error().code == errc::out_of_memory);
  CHECK(st.error().message == "[test] huge table: cannot allocate 9223372036854775808 bytes");
  CHECK(v.size() == 3);  // unchanged
  // 2^56 elements (2^59 bytes): below max_size but above kMaxAllocationBytes, refused without
  // calling operator new (a sanitizer's allocator would abort there instead of throwing).
  st = d::try_resize(v, std::size_t{1} << 56, "test", "big table");
  REQUIRE_FALSE(st);
  CHECK_THAT(st.error().message, Contains("big table: cannot allocate 576460752303423488 bytes"));
  CHECK(v == std::vector<std::uint64_t>{7, 7, 7});
  REQUIRE(d::try_resize(v, 5, "test", "small", std::uint64_t{9}));
  CHECK(v == std::vector<std::uint64_t>{7, 7, 7, 9, 9});
  REQUIRE(d::try_assign(v, 2, 1, "test", "small"));
  CHECK(v == std::vector<std::uint64_t>{1, 1});
  CHECK_FALSE(d::try_reserve(v, std::size_t{1} << 56, "test", "reserve"));

  auto a = d::try_allocate_aligned<float>(std::size_t{1} << 60, "test", "scratch");
  REQUIRE_FALSE(a);
  CHECK(a.error().code == errc::out_of_memory);
  CHECK_THAT(a.error().message, Contains("[test] scratch: cannot allocate"));
  CHECK_FALSE(d::allocate_aligned<std::byte>(d::kMaxAllocationBytes + 1));
  auto ok = d::try_allocate_aligned<float>(16, "test", "scratch");
  REQUIRE(ok);
  CHECK(*ok != nullptr);
}

}  // namespace test_detail_aligned_buffer
