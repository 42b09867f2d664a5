// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/detail/bytes.hpp: little-endian loads and stores, and the checksums, whose
// values are stored in files (prefix blobs, prompt caches, packed caches) and so must never
// change: the golden values below were computed by the code these helpers replaced.
#include "edgellm/detail/bytes.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace test_detail_bytes {

namespace {

namespace d = edgellm::detail;

std::vector<std::byte> pattern(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  return v;
}

}  // namespace

TEST_CASE("little-endian loads and stores", "[detail]") {
  std::byte b[8] = {};
  d::store_le64(b, 0x0102030405060708ull);
  CHECK(b[0] == std::byte{0x08});
  CHECK(b[7] == std::byte{0x01});
  CHECK(d::load_le64(b) == 0x0102030405060708ull);
  d::store_le32(b + 1, 0xA1B2C3D4u);  // unaligned
  CHECK(b[1] == std::byte{0xD4});
  CHECK(b[4] == std::byte{0xA1});
  CHECK(d::load_le32(b + 1) == 0xA1B2C3D4u);

  const float f[3] = {1.0f, -2.5f, 3.0e-8f};
  std::byte buf[12];
  CHECK(d::store_le_array(buf, f, 3) == buf + 12);
  CHECK(d::load_le32(buf) == 0x3F800000u);  // 1.0f
  float back[3] = {};
  CHECK(d::load_le_array(buf, back, 3) == buf + 12);
  CHECK(std::memcmp(back, f, sizeof f) == 0);
  const std::uint16_t h[2] = {0x3C00, 0xBC00};
  CHECK(d::store_le_array(buf, h, 2) == buf + 4);
  CHECK(d::load_le32(buf) == 0xBC003C00u);

  CHECK(d::hex64(0x1234abcdull) == "0x000000001234abcd");
}

TEST_CASE("checksum64 and lane_checksum64 keep the values stored in files", "[detail]") {
  struct Golden {
    std::size_t n;
    std::uint64_t checksum64, lane;
  };
  const Golden golden[] = {
      {0, 0xefd01f60ba992926ull, 0x8d800c463e3d3889ull},
      {1, 0xd8c9bb075c493102ull, 0x170d44fe84c6ebcbull},
      {7, 0x37120fb2f4eb8368ull, 0xfbe410bb3f5a2bc8ull},
      {8, 0xddd0515a86a170a1ull, 0x8e8a31866e5119c2ull},
      {9, 0x4432aa671cd06e7full, 0xd1d32e0183415ec6ull},
      {31, 0x50e44b5f9b7350ffull, 0x408904bf69a89f1bull},
      {32, 0x8a859bc42772bfb8ull, 0x1e763069601a394dull},
      {33, 0xfb66abf1061ccc5eull, 0x5ea3236e8c4c3773ull},
      {100, 0x1453f793e8b62745ull, 0x76fae59b99865dfdull},
      {1000, 0x6884373ebf64e12dull, 0x4a120fd6383de6c6ull},
  };
  const auto data = pattern(1000);
  for (const Golden& g : golden) {
    INFO(g.n << " bytes");
    const std::span<const std::byte> s(data.data(), g.n);
    CHECK(d::checksum64(s) == g.checksum64);
    CHECK(d::checksum64(s, d::kFnvOffset) == g.checksum64);
    CHECK(d::lane_checksum64(s) == g.lane);
  }
  // Another seed, another value.
  CHECK(d::checksum64(std::span(data)) != d::checksum64(std::span(data), 1));

  // FNV-1a over strings with a 0xFF separator per field: the packed cache's source key.
  std::uint64_t h = d::kFnvOffset;
  for (std::string_view field : {"edgellm q4 pack v1", "", "lm_head=q4"}) {
    h = d::fnv1a64(h, field);
    h = d::fnv1a64(h, std::string_view("\xFF", 1));
  }
  CHECK(h == 0x971b8be379ebad4dull);
}

TEST_CASE("checksums notice changed, swapped and missing words", "[detail]") {
  const auto a = pattern(4096 + 13);
  for (auto sum : {+[](std::span<const std::byte> s) { return d::checksum64(s); },
                   +[](std::span<const std::byte> s) { return d::lane_checksum64(s); }}) {
    const auto base = sum(a);
    auto b = a;
    b[100] ^= std::byte{1};
    CHECK(sum(b) != base);
    b = a;
    std::swap_ranges(b.begin(), b.begin() + 8, b.begin() + 8);  // swap two words
    CHECK(sum(b) != base);
    CHECK(sum(std::span(a).first(a.size() - 1)) != base);
    CHECK(sum(std::span(a).first(a.size() - 8)) != base);
  }
  // LaneChecksum64 fed in pieces of a multiple of 32 bytes (the last one shorter) equals one
  // call: the packed cache's copy path checksums 1 MiB pieces.
  for (std::size_t piece : {32u, 64u, 1024u, 4096u}) {
    d::LaneChecksum64 c;
    for (std::size_t o = 0; o < a.size(); o += piece)
      c.update(a.data() + o, std::min(piece, a.size() - o));
    CHECK(c.finish() == d::lane_checksum64(a));
  }
}

}  // namespace test_detail_bytes
