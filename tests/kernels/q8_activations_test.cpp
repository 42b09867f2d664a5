// SPDX-License-Identifier: Apache-2.0
#include "edgellm/kernels/q8_activations.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "edgellm/kernels/reference.hpp"
#include "support/test_util.hpp"
#include "support/prelude.hpp"

namespace test_kernels_q8_activations {

using namespace edgellm::kernels;

namespace {
struct Q8Buffer {
  std::unique_ptr<std::byte[]> raw;
  Q8ActivationsView view;
  Q8Buffer(std::size_t m, std::size_t k, std::size_t G)
      : raw(new std::byte[q8_activation_bytes(m, k, G) + 64]) {
    auto* p = reinterpret_cast<std::byte*>(
        (reinterpret_cast<std::uintptr_t>(raw.get()) + 63) & ~std::uintptr_t{63});
    view = make_q8_view(p, m, k, G);
  }
};
}  // namespace

TEMPLATE_LIST_TEST_CASE("quantize_activations_q8 equals its scalar twin bit for bit",
                        "[kernels][q8]", test::TestArchs) {
  auto rng = test::make_rng(31);
  const std::size_t G = GENERATE(32, 64, 128);
  const std::size_t m = 5, k = 4 * G, ldx = k + 1;
  auto x = test::random_floats(rng, m * ldx);
  for (std::size_t i = 0; i < G; ++i) x[ldx + i] = 0.0f;   // an all-zero group
  x[2 * ldx + 3] = 1e4f;                                    // an outlier
  x[3 * ldx + 2 * G + 1] = std::numeric_limits<float>::quiet_NaN();
  x[4 * ldx + 5] = -std::numeric_limits<float>::infinity();
  Q8Buffer a(m, k, G), b(m, k, G);
  quantize_activations_q8<TestType>(x.data(), ldx, a.view, 0, m);
  reference::quantize_activations_q8(x.data(), ldx, b.view);
  const std::size_t ng = k / G;
  REQUIRE(std::memcmp(a.view.q, b.view.q, m * k) == 0);
  REQUIRE(std::memcmp(a.view.sum, b.view.sum, m * ng * 4) == 0);
  for (std::size_t i = 0; i < m * ng; ++i) {
    if (std::isnan(b.view.scale[i])) {
      REQUIRE(std::isnan(a.view.scale[i]));
    } else {
      REQUIRE(a.view.scale[i] == b.view.scale[i]);
    }
  }
  // Properties: |x - dx q| <= dx / 2 (plus fp32 rounding of x * 127 / amax), |q| <= 127,
  // sums match, zero group -> zero scale, non-finite group -> NaN scale.
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t g = 0; g < ng; ++g) {
      const float dx = b.view.scale[i * ng + g];
      std::int32_t sum = 0;
      for (std::size_t c = g * G; c < (g + 1) * G; ++c) {
        const int q = b.view.q[i * k + c];
        REQUIRE(std::abs(q) <= 127);
        sum += q;
        if (!std::isnan(dx))
          REQUIRE(std::fabs(x[i * ldx + c] - dx * static_cast<float>(q)) <= dx * 0.5f * 1.0001f);
      }
      REQUIRE(sum == b.view.sum[i * ng + g]);
    }
  }
  REQUIRE(b.view.scale[1 * ng + 0] == 0.0f);
  REQUIRE(std::isnan(b.view.scale[3 * ng + 2]));
  REQUIRE(std::isnan(b.view.scale[4 * ng + 0]));
}

}  // namespace test_kernels_q8_activations
