// SPDX-License-Identifier: Apache-2.0
// Tests for edgellm/kernels/elementwise.hpp against their scalar twins (kernels/reference.hpp).
#include "edgellm/kernels/elementwise.hpp"

#include "edgellm/kernels/reference.hpp"
#include "support/test_util.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <vector>

namespace test_kernels_elementwise {

namespace {

const double kU = std::ldexp(1.0, -24);  // fp32 unit roundoff

}  // namespace

TEST_CASE("rms_norm: within a few ulp of the double twin, rows [r0, r1) only", "[kernels]") {
  const std::size_t n = GENERATE(std::size_t{1}, std::size_t{7}, std::size_t{64}, std::size_t{333});
  auto rng = edgellm::test::make_rng(n);
  const std::size_t rows = 4;
  const auto x = edgellm::test::random_floats(rng, rows * n, 3.0f);
  const auto w = edgellm::test::random_floats(rng, n);
  std::vector<float> out(rows * n, -7.0f), ref(rows * n, -7.0f);
  edgellm::kernels::rms_norm(x.data(), w.data(), out.data(), n, 1, 3, 1e-5f);
  edgellm::kernels::reference::rms_norm(x.data(), w.data(), ref.data(), n, 1, 3, 1e-5f);
  for (std::size_t i = 0; i < rows * n; ++i) {
    if (i < n || i >= 3 * n) {
      REQUIRE(out[i] == -7.0f);  // rows outside [r0, r1) untouched
      continue;
    }
    // fp32 rounding of var, of var + eps, sqrt, 1 / ., and two products: <= 8 u relative.
    REQUIRE(std::fabs(out[i] - ref[i]) <= 8 * kU * std::fabs(ref[i]) + 1e-30);
  }
  // The same bits whichever rows are asked for together.
  std::vector<float> one(rows * n);
  edgellm::kernels::rms_norm(x.data(), w.data(), one.data(), n, 2, 3, 1e-5f);
  for (std::size_t i = 2 * n; i < 3 * n; ++i) REQUIRE(one[i] == out[i]);
}

TEST_CASE("silu_mul: within a few ulp of the double twin", "[kernels]") {
  const std::size_t n = GENERATE(std::size_t{1}, std::size_t{15}, std::size_t{1000});
  auto rng = edgellm::test::make_rng(n + 1);
  auto g = edgellm::test::random_floats(rng, n, 6.0f);
  const auto u = edgellm::test::random_floats(rng, n);
  auto ref = g;
  edgellm::kernels::silu_mul(g.data(), u.data(), n);
  edgellm::kernels::reference::silu_mul(ref.data(), u.data(), n);
  for (std::size_t i = 0; i < n; ++i)
    REQUIRE(std::fabs(g[i] - ref[i]) <= 16 * kU * std::fabs(ref[i]) + 1e-30);
}

TEST_CASE("rope: tables and rotation against the double twin", "[kernels]") {
  const std::size_t hd = 16, half = 8, heads = 3, rows = 5, p0 = 1000;
  std::vector<float> inv(half);
  for (std::size_t i = 0; i < half; ++i)
    inv[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / hd));
  std::vector<float> cs(rows * half), sn(rows * half);
  edgellm::kernels::rope_tables(inv.data(), half, p0, rows, cs.data(), sn.data());
  for (std::size_t t = 0; t < rows; ++t) {
    for (std::size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p0 + t) * inv[i];  // one fp32 product, as in HF
      REQUIRE(cs[t * half + i] == std::cos(angle));
      REQUIRE(sn[t * half + i] == std::sin(angle));
    }
  }
  auto rng = edgellm::test::make_rng(3);
  auto v = edgellm::test::random_floats(rng, rows * heads * hd);
  auto ref = v;
  edgellm::kernels::rope(v.data(), rows, heads, hd, cs.data(), sn.data());
  edgellm::kernels::reference::rope(ref.data(), rows, heads, hd, cs.data(), sn.data());
  for (std::size_t t = 0; t < rows; ++t) {
    for (std::size_t h = 0; h < heads; ++h) {
      for (std::size_t i = 0; i < half; ++i) {
        const std::size_t at = (t * heads + h) * hd + i;
        // a c - b s: two products and a difference, each rounded (or one FMA): <= 3 u (|a c| +
        // |b s|) <= 3 u sqrt(2) |(a, b)|.
        const double mag = std::hypot(ref[at], ref[at + half]) * 1.5;
        REQUIRE(std::fabs(v[at] - ref[at]) <= 3 * kU * mag + 1e-30);
        REQUIRE(std::fabs(v[at + half] - ref[at + half]) <= 3 * kU * mag + 1e-30);
      }
    }
  }
}

TEST_CASE("add: exactly the twin", "[kernels]") {
  auto rng = edgellm::test::make_rng(9);
  auto x = edgellm::test::random_floats(rng, 37);
  const auto y = edgellm::test::random_floats(rng, 37);
  auto ref = x;
  edgellm::kernels::add(x.data(), y.data(), x.size());
  edgellm::kernels::reference::add(ref.data(), y.data(), ref.size());
  CHECK(x == ref);
}

}  // namespace test_kernels_elementwise
