// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/float16.hpp"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace test_kernels_float16 {

using namespace edgellm::kernels;

namespace {
// Independent reference: the fp16 value of bits h, computed with ldexp from the definition.
double f16_value(std::uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(1024 + m, e - 25);
}
}  // namespace

TEST_CASE("f16_to_f32 is exact for every fp16 value", "[kernels][float16]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const double ref = f16_value(static_cast<std::uint16_t>(h));
    const float got = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(static_cast<double>(got) == ref);
      REQUIRE(std::signbit(got) == bool(h & 0x8000));
    }
  }
}

TEST_CASE("f32_to_f16 round-trips every fp16 value and rounds to nearest even",
          "[kernels][float16]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      REQUIRE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    REQUIRE(f32_to_f16(f) == h);
  }
  // Ties between adjacent fp16 values go to the even mantissa; others to the nearest.
  for (std::uint32_t h = 0; h < 0x7BFF; ++h) {
    const double a = f16_value(static_cast<std::uint16_t>(h));
    const double b = f16_value(static_cast<std::uint16_t>(h + 1));
    const float mid = static_cast<float>((a + b) / 2);  // exact: fp16 midpoints fit in fp32
    REQUIRE(static_cast<double>(mid) == (a + b) / 2);
    REQUIRE(f32_to_f16(mid) == ((h & 1) ? h + 1 : h));
    const float above = std::nextafter(mid, INFINITY), below = std::nextafter(mid, -INFINITY);
    REQUIRE(f32_to_f16(above) == h + 1);
    REQUIRE(f32_to_f16(below) == h);
  }
  REQUIRE(f32_to_f16(65520.0f) == 0x7C00);        // rounds to +inf
  REQUIRE(f32_to_f16(65519.99f) == 0x7BFF);       // largest finite
  REQUIRE(f32_to_f16(-1e10f) == 0xFC00);
  REQUIRE(f32_to_f16(std::ldexp(1.0f, -25)) == 0);  // tie between 0 and the smallest subnormal
  REQUIRE(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 1);
  REQUIRE(f32_to_f16(-0.0f) == 0x8000);
}

TEST_CASE("bfloat16 conversions", "[kernels][float16]") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_f32(static_cast<std::uint16_t>(b));
    REQUIRE(std::bit_cast<std::uint32_t>(f) == (b << 16));
    if (!std::isnan(f)) REQUIRE(f32_to_bf16(f) == b);
  }
  REQUIRE(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);  // tie -> even
  REQUIRE(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  REQUIRE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("f16_to_f32_branchless equals f16_to_f32 for every fp16 value", "[kernels][float16]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto a = std::bit_cast<std::uint32_t>(f16_to_f32_branchless(static_cast<std::uint16_t>(h)));
    const auto b = std::bit_cast<std::uint32_t>(f16_to_f32(static_cast<std::uint16_t>(h)));
    INFO("fp16 bits " << h);
    REQUIRE(a == b);
  }
}

}  // namespace test_kernels_float16
