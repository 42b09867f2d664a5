// SPDX-License-Identifier: Apache-2.0
#include "edgellm/quant/compensated_rounding.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "edgellm/kernels/quantize.hpp"
#include "support/prelude.hpp"
#include "support/test_util.hpp"

namespace test_quant_compensated_rounding {

using namespace edgellm;
using namespace edgellm::quant;

namespace {

// Inputs X [m][k] whose channels share a common component (correlated, as activations are):
// x_t = a_t * c + noise, c one random direction.
std::vector<float> correlated_inputs(std::mt19937_64& rng, std::size_t m, std::size_t k) {
  const std::vector<float> c = test::random_floats(rng, k, 1.0f);
  std::vector<float> x = test::random_floats(rng, m * k, 0.3f);
  const std::vector<float> a = test::random_floats(rng, m, 2.0f);
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t i = 0; i < k; ++i) x[t * k + i] += a[t] * c[i];
  return x;
}

// sum over tokens and rows of (x_t . (w_r - v_r))^2: the outputs' squared error.
double output_error(std::span<const float> x, std::size_t m, std::span<const float> w,
                    std::span<const float> v, std::size_t n, std::size_t k) {
  double total = 0.0;
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t r = 0; r < n; ++r) {
      double d = 0.0;
      for (std::size_t c = 0; c < k; ++c)
        d += double(x[t * k + c]) * (double(w[r * k + c]) - double(v[r * k + c]));
      total += d * d;
    }
  return total;
}

}  // namespace

TEST_CASE("compensated codes keep the grid, round to nearest for uncorrelated inputs, and cut "
          "the output error for correlated ones",
          "[quant][compensated]") {
  std::mt19937_64 rng(41);
  const std::size_t n = 37, k = 256, G = 128, m = 512;
  const std::vector<float> w = test::random_floats(rng, n * k, 0.05f);
  auto rtn = kernels::quantize_rtn(w, n, k, G);
  REQUIRE(rtn);

  SECTION("inputs on separate channels: H is diagonal, nothing to spread, the codes are RTN's") {
    std::vector<float> x(k * k, 0.0f);
    for (std::size_t t = 0; t < k; ++t) x[t * k + t] = 0.5f + float(t % 7);
    kernels::UnpackedQ4 u = *rtn;
    REQUIRE(compensate_codes(u, w, input_grams(x, k, k, G)));
    CHECK(u.q == rtn->q);
    CHECK(u.scale == rtn->scale);
    CHECK(u.zero == rtn->zero);
  }

  SECTION("correlated inputs: same scales and zeros, codes in range, a smaller output error, "
          "the same codes on any thread count") {
    const std::vector<float> x = correlated_inputs(rng, m, k);
    kernels::UnpackedQ4 u = *rtn;
    REQUIRE(compensate_codes(u, w, input_grams(x, m, k, G)));
    CHECK(u.scale == rtn->scale);
    CHECK(u.zero == rtn->zero);
    for (auto q : u.q) REQUIRE(q <= 15);
    CHECK(u.q != rtn->q);
    const double e_rtn = output_error(x, m, w, kernels::dequantize(*rtn), n, k);
    const double e_comp = output_error(x, m, w, kernels::dequantize(u), n, k);
    INFO("output error: round to nearest " << e_rtn << ", compensated " << e_comp);
    CHECK(e_comp < 0.5 * e_rtn);

    auto pool = ThreadPool::create(2);
    REQUIRE(pool);
    kernels::UnpackedQ4 u2 = *rtn;
    REQUIRE(compensate_codes(u2, w, input_grams(x, m, k, G, pool->get()), {}, pool->get()));
    CHECK(u2.q == u.q);
  }

  SECTION("a group whose inputs are all zero keeps round-to-nearest codes") {
    std::vector<float> x = correlated_inputs(rng, m, k);
    for (std::size_t t = 0; t < m; ++t)
      for (std::size_t c = 0; c < G; ++c) x[t * k + c] = 0.0f;  // group 0 never sees an input
    kernels::UnpackedQ4 u = *rtn;
    REQUIRE(compensate_codes(u, w, input_grams(x, m, k, G)));
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t c = 0; c < G; ++c) REQUIRE(u.q[r * k + c] == rtn->q[r * k + c]);
  }

  SECTION("shapes that disagree are refused by name") {
    const std::vector<float> x = correlated_inputs(rng, m, k);
    kernels::UnpackedQ4 u = *rtn;
    const std::vector<float> gram = input_grams(x, m, k, G);
    auto st = compensate_codes(u, std::span(w).first(k), gram);
    REQUIRE_FALSE(st);
    CHECK(st.error().message.find("w: size") != std::string::npos);
    st = compensate_codes(u, w, std::span(gram).first(G * G));
    REQUIRE_FALSE(st);
    CHECK(st.error().message.find("gram: size") != std::string::npos);
    CHECK(u.q == rtn->q);  // untouched
  }
}

TEST_CASE("compensated fake quantisation stays on the 3-bit grid and cuts the output error",
          "[quant][compensated]") {
  std::mt19937_64 rng(43);
  const std::size_t n = 21, k = 128, m = 400;
  const QuantSpec spec{3, 64, false};
  const std::vector<float> w = test::random_floats(rng, n * k, 0.05f);
  const std::vector<float> x = correlated_inputs(rng, m, k);
  std::vector<float> nearest = w, comp = w;
  REQUIRE(fake_quantize(nearest, n, k, spec));
  REQUIRE(compensate_fake_quantize(comp, n, k, spec, input_grams(x, m, k, spec.group)));
  // Each group's values are (q - z) s on the grid fake_quantize_group chooses for the original
  // group: q an integer in [0, 7].
  for (std::size_t base = 0; base < n * k; base += spec.group) {
    float lo = 0.0f, hi = 0.0f;
    for (std::size_t i = 0; i < spec.group; ++i) {
      lo = std::min(lo, w[base + i]);
      hi = std::max(hi, w[base + i]);
    }
    const float s = kernels::f16_to_f32(kernels::f32_to_f16(std::max(hi - lo, 1e-5f) / 7.0f));
    const float z = std::clamp(-std::nearbyint(lo / s), 0.0f, 7.0f);
    for (std::size_t i = 0; i < spec.group; ++i) {
      const float q = comp[base + i] / s + z;
      REQUIRE(q == std::nearbyint(q));
      REQUIRE(q >= 0.0f);
      REQUIRE(q <= 7.0f);
    }
  }
  const double e_near = output_error(x, m, w, nearest, n, k);
  const double e_comp = output_error(x, m, w, comp, n, k);
  INFO("output error: round to nearest " << e_near << ", compensated " << e_comp);
  CHECK(e_comp < 0.5 * e_near);

  auto st = compensate_fake_quantize(comp, n, k, QuantSpec{8, 64, true}, input_grams(x, m, k, 64));
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("asymmetric") != std::string::npos);
}

}  // namespace test_quant_compensated_rounding
