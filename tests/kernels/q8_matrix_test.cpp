// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/q8_matrix.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_q8_matrix {

using namespace edgellm::kernels;

TEST_CASE("quantize_q8 round trip is within half a step per group", "[kernels][q8]") {
  auto rng = edgellm::test::make_rng(81);
  for (std::size_t G : {32, 64, 128}) {
    const std::size_t n = 13, k = 3 * G;
    auto w = edgellm::test::random_floats(rng, n * k, 0.05f);
    for (std::size_t c = 0; c < G; ++c) w[2 * k + c] = 0.0f;  // an all-zero group
    auto q = quantize_q8(w, n, k, G);
    REQUIRE(q);
    REQUIRE(q->byte_size() == q8_matrix_bytes(n, k, G));
    REQUIRE(reinterpret_cast<std::uintptr_t>(q->codes(0)) % 64 == 0);
    std::vector<float> row(k);
    for (std::size_t r = 0; r < n; ++r) {
      q->row(r, row.data());
      for (std::size_t c = 0; c < k; ++c) {
        const float s = q->scales(r)[c / G];
        REQUIRE(q->codes(r)[c] >= -127);
        REQUIRE(std::fabs(row[c] - w[r * k + c]) <= s * 0.5f * (1 + 1e-5f) + 1e-12f);
      }
    }
    REQUIRE(q->scales(2)[0] == 0.0f);
    REQUIRE(q->codes(2)[0] == 0);
  }
}

TEST_CASE("quantize_q8 from a dense fp16 matrix equals the fp32 quantiser", "[kernels][q8]") {
  auto rng = edgellm::test::make_rng(82);
  const std::size_t n = 5, k = 256;
  auto w = edgellm::test::random_floats(rng, n * k);
  std::vector<std::uint16_t> h(n * k);
  for (std::size_t i = 0; i < n * k; ++i) {
    h[i] = f32_to_f16(w[i]);
    w[i] = f16_to_f32(h[i]);
  }
  auto d = DenseMatrix::view(DenseType::f16, n, k, std::as_bytes(std::span(h)), "w");
  REQUIRE(d);
  auto a = quantize_q8(*d, 128);
  auto b = quantize_q8(w, n, k, 128);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(std::memcmp(a->codes(0), b->codes(0), n * k) == 0);
  REQUIRE(std::memcmp(a->scales(0), b->scales(0), n * 2 * 4) == 0);
  // In blocks of rows, with a call after each: the same matrix.
  std::vector<std::size_t> done;
  auto c = quantize_q8(*d, 128, 2, [&](std::size_t r) { done.push_back(r); });
  REQUIRE(c);
  REQUIRE(std::memcmp(a->codes(0), c->codes(0), n * k) == 0);
  REQUIRE(std::memcmp(a->scales(0), c->scales(0), n * 2 * 4) == 0);
  CHECK(done == std::vector<std::size_t>{2, 4, 5});
}

TEST_CASE("quantize_q8 rejects bad input with a named error", "[kernels][q8]") {
  std::vector<float> w(2 * 128, 1.0f);
  REQUIRE_FALSE(quantize_q8(w, 2, 100, 128));  // size mismatch
  auto bad_group = quantize_q8(w, 2, 128, 48);
  REQUIRE_FALSE(bad_group);
  REQUIRE_THAT(bad_group.error().message, Contains("group_size"));
  w[130] = std::numeric_limits<float>::quiet_NaN();
  auto nan = quantize_q8(w, 2, 128, 128);
  REQUIRE_FALSE(nan);
  REQUIRE_THAT(nan.error().message, Contains("row 1, column 2"));
}

}  // namespace test_kernels_q8_matrix
