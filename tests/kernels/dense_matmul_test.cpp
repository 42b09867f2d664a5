// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/dense_matmul.hpp"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_dense_matmul {

using namespace edgellm::kernels;

namespace {

// W [n][k] rounded to the storage type: the stored bytes and the fp32 values they hold.
struct Stored {
  std::vector<std::byte> bytes;
  std::vector<float> values;
};

Stored store(const std::vector<float>& w, DenseType t) {
  Stored s;
  s.values = w;
  s.bytes.resize(w.size() * dense_element_size(t) + 2);  // +2: an odd start for misalignment
  std::byte* p = s.bytes.data() + 2;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (t == DenseType::f32) {
      std::memcpy(p + 4 * i, &w[i], 4);
    } else {
      const std::uint16_t h = t == DenseType::f16 ? f32_to_f16(w[i]) : f32_to_bf16(w[i]);
      std::memcpy(p + 2 * i, &h, 2);
      s.values[i] = t == DenseType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return s;
}

const std::byte* data(const Stored& s) { return s.bytes.data() + 2; }

}  // namespace

TEST_CASE("dense_matmul_rows: within the stated bound of the exact product, any shape",
          "[kernels][dense]") {
  const DenseType t = GENERATE(DenseType::f32, DenseType::f16, DenseType::bf16);
  const std::size_t k = GENERATE(1, 7, 15, 16, 17, 31, 33, 47, 64, 128, 200, 1037);
  const std::size_t n = 21;  // two 8-row blocks and a tail of 5 (4-row blocks: 5 and a tail of 1)
  const std::size_t m = 5;
  auto rng = test::make_rng(k * 3 + static_cast<std::size_t>(t));
  const Stored w = store(test::random_floats(rng, n * k), t);
  const auto x = test::random_floats(rng, m * k, 3.0f);
  const auto bias = test::random_floats(rng, n);
  std::vector<float> y(m * n), y_ref(m * n);
  std::vector<float> scratch(dense_scratch_floats(k) + 1);
  dense_matmul_rows(t, data(w), k, x.data(), k, m, bias.data(), y.data(), n, 0, n, scratch.data());
  reference::dense_matmul_rows(t, data(w), k, x.data(), k, m, bias.data(), y_ref.data(), n, 0, n);
  const double u = std::ldexp(1.0, -24);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t r = 0; r < n; ++r) {
      double exact = bias[r], mag = std::fabs(bias[r]);
      for (std::size_t c = 0; c < k; ++c) {
        exact += static_cast<double>(x[i * k + c]) * w.values[r * k + c];
        mag += std::fabs(static_cast<double>(x[i * k + c]) * w.values[r * k + c]);
      }
      INFO("k " << k << " row " << r << " x row " << i);
      REQUIRE(std::fabs(y[i * n + r] - exact) <= (static_cast<double>(k) / 16 + 8) * u * mag);
      // the scalar twin: one sequential sum, |err| <= (k + 1) u sum|x w|
      REQUIRE(std::fabs(y_ref[i * n + r] - exact) <= (static_cast<double>(k) + 2) * u * mag);
    }
  }
}

TEST_CASE("dense_matmul_rows: bits independent of m, row range and scratch", "[kernels][dense]") {
  const DenseType t = GENERATE(DenseType::f32, DenseType::f16, DenseType::bf16);
  const std::size_t k = 136, n = 29, m = 7;
  auto rng = test::make_rng(99);
  const Stored w = store(test::random_floats(rng, n * k), t);
  const auto x = test::random_floats(rng, m * k);
  std::vector<float> all(m * n);
  std::vector<float> scratch(dense_scratch_floats(k) + 1);
  dense_matmul_rows(t, data(w), k, x.data(), k, m, nullptr, all.data(), n, 0, n, scratch.data());
  // one activation row at a time, rows of W in uneven ranges, with and without scratch
  for (std::size_t i = 0; i < m; ++i) {
    std::vector<float> one(n);
    for (std::size_t r0 = 0; r0 < n;) {
      const std::size_t r1 = std::min(n, r0 + 1 + (r0 * 7) % 11);
      dense_matmul_rows(t, data(w), k, x.data() + i * k, k, 1, nullptr, one.data(), n, r0, r1);
      r0 = r1;
    }
    for (std::size_t r = 0; r < n; ++r)
      REQUIRE(std::bit_cast<std::uint32_t>(one[r]) == std::bit_cast<std::uint32_t>(all[i * n + r]));
  }
  std::vector<float> no_scratch(m * n);
  dense_matmul_rows(t, data(w), k, x.data(), k, m, nullptr, no_scratch.data(), n, 0, n, nullptr);
  REQUIRE(std::memcmp(no_scratch.data(), all.data(), all.size() * sizeof(float)) == 0);
}

TEST_CASE("dense_matmul_rows: leading dimensions, NaN and Inf propagate", "[kernels][dense]") {
  const std::size_t k = 40, n = 9, m = 3, ldx = 45, ldy = 13;
  auto rng = test::make_rng(5);
  const Stored w = store(test::random_floats(rng, n * k), DenseType::f16);
  auto x = test::random_floats(rng, m * ldx);
  std::vector<float> y(m * ldy, -7.0f), y_ref(m * ldy, -7.0f);
  x[1 * ldx + 3] = std::numeric_limits<float>::quiet_NaN();
  x[2 * ldx + 39] = std::numeric_limits<float>::infinity();
  dense_matmul_rows(DenseType::f16, data(w), k, x.data(), ldx, m, nullptr, y.data(), ldy, 0, n);
  reference::dense_matmul_rows(DenseType::f16, data(w), k, x.data(), ldx, m, nullptr, y_ref.data(),
                               ldy, 0, n);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t r = 0; r < ldy; ++r) {
      const float v = y[i * ldy + r], ref = y_ref[i * ldy + r];
      if (r >= n) {
        REQUIRE(v == -7.0f);  // outside the output columns: untouched
      } else if (i == 1) {
        REQUIRE(std::isnan(v));
      } else if (i == 2) {
        REQUIRE(std::isinf(v));
        REQUIRE(std::signbit(v) == std::signbit(ref));
      } else {
        REQUIRE(std::fabs(v - ref) <= 1e-4f * (1 + std::fabs(ref)));
      }
    }
  }
}

}  // namespace test_kernels_dense_matmul
