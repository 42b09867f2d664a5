// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/quantize.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_quantize {

using namespace edgellm::kernels;

TEST_CASE("quantize_rtn: codes in range and error at most half a step", "[kernels][quantize]") {
  auto rng = test::make_rng(1);
  const std::size_t G = GENERATE(32, 64, 128);
  const std::size_t n = 13, k = 4 * G;
  auto w = test::random_floats(rng, n * k, 0.05f);
  w[5] = 3.0f;    // an outlier widens its group's range
  w[k + 7] = -2.0f;
  auto q = quantize_rtn(w, n, k, G);
  REQUIRE(q);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t c = 0; c < k; ++c) {
      REQUIRE(q->q[r * k + c] <= 15);
      const float s = f16_to_f32(q->scale[r * (k / G) + c / G]);
      // Within s/2, except at the ends of the range: rounding s to fp16 (relative 2^-11) can
      // stretch max - min to 15 * (1 + 2^-11) steps, and the clamp to [0, 15] then adds up to
      // 15 * 2^-11 < 0.008 of a step.
      REQUIRE(std::fabs(q->weight(r, c) - w[r * k + c]) <= s * 0.508f);
    }
  }
}

TEST_CASE("quantize_rtn from fp16 and bf16 equals quantize_rtn of the widened values",
          "[kernels][quantize]") {
  auto rng = test::make_rng(2);
  const std::size_t n = 5, k = 256;
  auto w = test::random_floats(rng, n * k);
  std::vector<std::uint16_t> h(n * k), b(n * k);
  std::vector<float> wh(n * k), wb(n * k);
  for (std::size_t i = 0; i < w.size(); ++i) {
    h[i] = f32_to_f16(w[i]);
    b[i] = f32_to_bf16(w[i]);
    wh[i] = f16_to_f32(h[i]);
    wb[i] = bf16_to_f32(b[i]);
  }
  auto qh = quantize_rtn_f16(h, n, k, 128), qh_ref = quantize_rtn(wh, n, k, 128);
  auto qb = quantize_rtn_bf16(b, n, k, 128), qb_ref = quantize_rtn(wb, n, k, 128);
  REQUIRE((qh && qb && qh_ref && qb_ref));
  REQUIRE(qh->q == qh_ref->q);
  REQUIRE(qh->scale == qh_ref->scale);
  REQUIRE(qb->q == qb_ref->q);
  REQUIRE(qb->zero == qb_ref->zero);
}

TEST_CASE("quantize_rtn: constant and all-zero groups", "[kernels][quantize]") {
  std::vector<float> w(2 * 128, 0.0f);
  for (std::size_t i = 128; i < 256; ++i) w[i] = 0.75f;
  auto q = quantize_rtn(w, 2, 128, 128);
  REQUIRE(q);
  for (std::size_t c = 0; c < 128; ++c) {
    REQUIRE(q->weight(0, c) == 0.0f);  // zero group dequantises to exactly zero
    REQUIRE(std::fabs(q->weight(1, c) - 0.75f) <= f16_to_f32(q->scale[1]) * 0.5f);
  }
}

TEST_CASE("quantize_rtn rejects bad input", "[kernels][quantize]") {
  std::vector<float> w(128, 1.0f);
  w[3] = std::numeric_limits<float>::quiet_NaN();
  auto nan = quantize_rtn(w, 1, 128, 128);
  REQUIRE_FALSE(nan);
  REQUIRE_THAT(nan.error().message, Catch::Contains("row 0, column 3"));
  auto size = quantize_rtn(std::span<const float>(w.data(), 100), 1, 128, 128);
  REQUIRE_FALSE(size);
  REQUIRE_THAT(size.error().message, Catch::Contains("w: size 100"));
  auto kbad = quantize_rtn(w, 1, 100, 128);
  REQUIRE_FALSE(kbad);
  REQUIRE_THAT(kbad.error().message, Catch::Contains("k: 100"));
}

TEST_CASE("pack_q4 / unpack_q4 is the identity on codes, zeros and scales",
          "[kernels][quantize]") {
  auto rng = test::make_rng(3);
  const std::size_t G = GENERATE(32, 64, 128);
  const std::size_t n = GENERATE(1, 8, 16, 17, 45);
  const std::size_t k = 3 * G;
  UnpackedQ4 w;
  w.n = n;
  w.k = k;
  w.group_size = G;
  std::uniform_int_distribution<int> code(0, 15);
  std::uniform_int_distribution<int> half(0, 0x7BFF);
  for (std::size_t i = 0; i < n * k; ++i) w.q.push_back(static_cast<std::uint8_t>(code(rng)));
  for (std::size_t i = 0; i < n * 3; ++i) {
    w.zero.push_back(static_cast<std::uint8_t>(code(rng)));
    w.scale.push_back(static_cast<std::uint16_t>(half(rng)));
  }
  auto packed = pack_q4(w);
  REQUIRE(packed);
  auto back = unpack_q4(*packed);
  REQUIRE(back.q == w.q);
  REQUIRE(back.zero == w.zero);
  REQUIRE(back.scale == w.scale);
  // Padding rows of the last tile are all zero.
  for (std::size_t r = n; r < packed->n_tiles() * 16; ++r) {
    REQUIRE(packed->zero(r, 0) == 0);
    REQUIRE(packed->scale_bits(r, 0) == 0);
    REQUIRE(packed->code(r, 0) == 0);
  }
}

TEST_CASE("pack_q4 rejects inconsistent input", "[kernels][quantize]") {
  UnpackedQ4 w;
  w.n = 2;
  w.k = 128;
  w.group_size = 128;
  w.q.assign(256, 0);
  w.zero.assign(2, 0);
  w.scale.assign(1, 0);
  auto r = pack_q4(w);
  REQUIRE_FALSE(r);
  REQUIRE_THAT(r.error().message, Catch::Contains("pack_q4"));
  w.scale.assign(2, 0);
  w.q[7] = 16;
  auto r2 = pack_q4(w);
  REQUIRE_FALSE(r2);
  REQUIRE_THAT(r2.error().message, Catch::Contains("code > 15"));
}

TEST_CASE("quantize_rtn_packed equals pack_q4(quantize_rtn) for every block size",
          "[kernels][quantize]") {
  auto rng = test::make_rng(7);
  const std::size_t n = 77, k = 256;  // 77 rows: a partial last tile
  auto w = test::random_floats(rng, n * k);
  std::vector<std::uint16_t> h(n * k);
  for (std::size_t i = 0; i < w.size(); ++i) h[i] = f32_to_f16(w[i]);
  const std::size_t G = GENERATE(32, 128);
  auto ref = quantize_rtn_f16(h, n, k, G);
  REQUIRE(ref);
  auto want = pack_q4(*ref);
  REQUIRE(want);
  auto d = DenseMatrix::view(DenseType::f16, n, k, std::as_bytes(std::span(h)), "w");
  REQUIRE(d);
  for (const std::size_t block : {std::size_t{1}, std::size_t{16}, std::size_t{33},
                                  std::size_t{64}, n, std::size_t{1000}}) {
    std::vector<std::size_t> done;
    auto got = quantize_rtn_packed(*d, G, block, [&](std::size_t r) { done.push_back(r); });
    REQUIRE(got);
    REQUIRE(got->byte_size() == want->byte_size());
    CHECK(std::memcmp(got->data(), want->data(), want->byte_size()) == 0);
    // rows_done: increasing, whole tiles of at least `block` rows, ending at n
    const std::size_t step = std::min(n, std::max<std::size_t>(16, (block + 15) / 16 * 16));
    REQUIRE(!done.empty());
    CHECK(done.back() == n);
    for (std::size_t i = 0; i < done.size(); ++i)
      CHECK(done[i] == std::min(n, (i + 1) * step));
  }
}

TEST_CASE("quantize_rtn_packed names the first non-finite value", "[kernels][quantize]") {
  const std::size_t n = 40, k = 128;
  std::vector<float> w(n * k, 0.5f);
  w[33 * k + 9] = std::numeric_limits<float>::infinity();
  auto d = DenseMatrix::view(DenseType::f32, n, k, std::as_bytes(std::span(w)), "w");
  REQUIRE(d);
  std::size_t last = 0;
  auto q = quantize_rtn_packed(*d, 128, 16, [&](std::size_t r) { last = r; });
  REQUIRE(!q);
  CHECK(q.error().message.find("row 33, column 9") != std::string::npos);
  CHECK(last == 32);  // the two blocks before the bad row were done
}

}  // namespace test_kernels_quantize
