// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/formats.hpp"
#include "support/prelude.hpp"

#include <catch2/catch.hpp>

#include <cstdint>

namespace test_kernels_formats {

using namespace edgellm::kernels;

TEST_CASE("Q4Tile layout", "[kernels][formats]") {
  STATIC_REQUIRE(sizeof(Q4Tile<128>) == 1088);
  STATIC_REQUIRE(alignof(Q4Tile<128>) == 64);
  STATIC_REQUIRE(offsetof(Q4Tile<128>, zero) == 32);
  STATIC_REQUIRE(offsetof(Q4Tile<128>, codes) == 64);
  REQUIRE(q4_tile_bytes(32) == sizeof(Q4Tile<32>));
  REQUIRE(q4_tile_bytes(64) == sizeof(Q4Tile<64>));
}

TEST_CASE("Q4Matrix geometry and accessors", "[kernels][formats]") {
  auto m = Q4Matrix::allocate(20, 256, 64);
  REQUIRE(m);
  REQUIRE(m->n_tiles() == 2);
  REQUIRE(m->n_groups() == 4);
  REQUIRE(m->byte_size() == 2 * 4 * q4_tile_bytes(64));
  REQUIRE(reinterpret_cast<std::uintptr_t>(m->data()) % 64 == 0);
  // Row 17, column 130: tile 1, group 2, k-block 0 (130 % 64 = 2), j = 2 -> low nibble.
  auto* tile = m->mutable_tile<64>(1, 2);
  tile->codes[0][4 * 1 + 2] = 0xA5;
  REQUIRE(m->code(17, 130) == 0x5);
  REQUIRE(m->code(17, 134) == 0xA);  // j = 6 -> high nibble of the same byte
  tile->zero[1] = 9;
  tile->scale[1] = 0x3C00;
  REQUIRE(m->zero(17, 2) == 9);
  REQUIRE(m->scale_bits(17, 2) == 0x3C00);
}

TEST_CASE("Q4Matrix rejects bad dimensions with named arguments", "[kernels][formats]") {
  auto bad_k = Q4Matrix::allocate(16, 100, 128);
  REQUIRE_FALSE(bad_k);
  REQUIRE_THAT(bad_k.error().message, Catch::Contains("k: 100"));
  auto bad_g = Q4Matrix::allocate(16, 128, 48);
  REQUIRE_FALSE(bad_g);
  REQUIRE_THAT(bad_g.error().message, Catch::Contains("group_size"));
  auto bad_n = Q4Matrix::allocate(0, 128, 128);
  REQUIRE_FALSE(bad_n);
  REQUIRE_THAT(bad_n.error().message, Catch::Contains("n:"));
  alignas(64) static std::byte buf[1088];
  auto small = Q4Matrix::view(buf, 100, 16, 128, 128);
  REQUIRE_FALSE(small);
  REQUIRE_THAT(small.error().message, Catch::Contains("data: need 1088 bytes"));
  auto null = Q4Matrix::view(nullptr, 1088, 16, 128, 128);
  REQUIRE_FALSE(null);
  auto unaligned = Q4Matrix::view(buf + 1, 1087, 1, 128, 128);
  REQUIRE_FALSE(unaligned);
  auto ok = Q4Matrix::view(buf, sizeof(buf), 16, 128, 128);
  REQUIRE(ok);
  REQUIRE_FALSE(ok->owns_data());
}

}  // namespace test_kernels_formats
