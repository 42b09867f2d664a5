// SPDX-License-Identifier: Apache-2.0
#include "edgellm/quant/awq_search.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "edgellm/kernels/q8_matrix.hpp"
#include "edgellm/kernels/quantize.hpp"
#include "support/prelude.hpp"
#include "support/test_util.hpp"

namespace test_quant_awq_search {

using namespace edgellm;
using namespace edgellm::quant;

namespace {

// Inputs X [m][k] whose channels in `outliers` are `factor` times larger than the rest: the
// activation outliers AWQ exists for.
std::vector<float> outlier_inputs(std::mt19937_64& rng, std::size_t m, std::size_t k,
                                  std::span<const std::size_t> outliers, float factor) {
  std::vector<float> x = test::random_floats(rng, m * k, 1.0f);
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t c : outliers) x[t * k + c] *= factor;
  return x;
}

double output_mse(std::span<const float> x, std::size_t m, std::span<const float> w,
                  std::span<const float> wq, std::size_t n, std::size_t k) {
  std::vector<float> a(m * n), b(m * n);
  matmul(w, n, k, x, m, a, nullptr);
  matmul(wq, n, k, x, m, b, nullptr);
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return s / double(a.size());
}

}  // namespace

TEST_CASE("fake_quantize at 4 bits equals kernels::quantize_rtn dequantised",
          "[quant][awq_search]") {
  auto rng = test::make_rng(11);
  const std::size_t n = 7, k = 256;
  auto w = test::random_floats(rng, n * k, 0.05f);
  w[3] = 0.9f;  // an outlier in one group
  for (std::size_t c = 128; c < 256; ++c) w[2 * k + c] = 0.01f + 1e-4f * float(c);  // one-signed
  auto q = kernels::quantize_rtn(w, n, k, 128);
  REQUIRE(q);
  const std::vector<float> ref = kernels::dequantize(*q);
  std::vector<float> fake = w;
  REQUIRE(fake_quantize(fake, n, k, {4, 128}));
  for (std::size_t i = 0; i < fake.size(); ++i) REQUIRE(fake[i] == ref[i]);
}

TEST_CASE("fake_quantize symmetric at 8 bits equals kernels::quantize_q8; 16 bits is fp16",
          "[quant][awq_search]") {
  auto rng = test::make_rng(13);
  const std::size_t n = 5, k = 256;
  auto w = test::random_floats(rng, n * k, 0.05f);
  w[7] = -0.8f;  // an outlier in one group
  for (std::size_t c = 128; c < 256; ++c) w[3 * k + c] = 0.0f;  // an all-zero group
  auto q = kernels::quantize_q8(w, n, k, 128);
  REQUIRE(q);
  std::vector<float> fake = w;
  QuantSpec s8{8, 128, true};
  CHECK(s8.max_code() == 127);
  REQUIRE(fake_quantize(fake, n, k, s8));
  std::vector<float> row(k);
  for (std::size_t r = 0; r < n; ++r) {
    q->row(r, row.data());
    for (std::size_t c = 0; c < k; ++c) REQUIRE(fake[r * k + c] == row[c]);
  }
  fake = w;
  REQUIRE(fake_quantize(fake, n, k, {QuantSpec::kKeepBits, 128}));
  for (std::size_t i = 0; i < w.size(); ++i)
    REQUIRE(fake[i] == kernels::f16_to_f32(kernels::f32_to_f16(w[i])));
}

TEST_CASE("fake_quantize: error shrinks with bits and stays within half a step",
          "[quant][awq_search]") {
  auto rng = test::make_rng(12);
  const std::size_t n = 5, k = 128;
  const auto w = test::random_floats(rng, n * k, 1.0f);
  double prev = std::numeric_limits<double>::infinity();
  for (unsigned bits : {2u, 3u, 4u, 8u}) {
    std::vector<float> f = w;
    REQUIRE(fake_quantize(f, n, k, {bits, 64}));
    double err = 0.0;
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t g = 0; g < 2; ++g) {
        float lo = 0.0f, hi = 0.0f;
        for (std::size_t c = 0; c < 64; ++c) {
          lo = std::min(lo, w[r * k + g * 64 + c]);
          hi = std::max(hi, w[r * k + g * 64 + c]);
        }
        const float step = (hi - lo) / float((1u << bits) - 1u);
        for (std::size_t c = 0; c < 64; ++c) {
          const std::size_t i = r * k + g * 64 + c;
          REQUIRE(std::fabs(f[i] - w[i]) <= step * 0.51f);
          err += (double(f[i]) - w[i]) * (double(f[i]) - w[i]);
        }
      }
    CHECK(err < prev);
    prev = err;
  }
}

TEST_CASE("fake_quantize: bad arguments are named", "[quant][awq_search]") {
  std::vector<float> w(2 * 96, 0.5f);
  auto st = fake_quantize(w, 2, 96, {4, 128});
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("group") != std::string::npos);
  st = fake_quantize(w, 2, 96, {9, 32});
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("bits") != std::string::npos);
  w[100] = std::numeric_limits<float>::quiet_NaN();
  st = fake_quantize(w, 2, 96, {4, 32});
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("row 1, column 4") != std::string::npos);
}

TEST_CASE("search_scales on a linear with activation outliers beats round-to-nearest",
          "[quant][awq_search]") {
  auto rng = test::make_rng(13);
  const std::size_t n = 48, k = 256, m = 96;
  const std::size_t outliers[] = {5, 77, 130, 200};
  const unsigned bits = GENERATE(3u, 4u);
  const std::vector<float> x = outlier_inputs(rng, m, k, outliers, 30.0f);
  const std::vector<float> w = test::random_floats(rng, n * k, 0.02f);
  const QuantSpec spec{bits, 128};

  LinearOutputLoss loss(x, m, w, n, k, nullptr);
  const WeightRef ws[] = {{w, n}};
  auto r = search_scales(std::span<const WeightRef>(ws), k, mean_abs_columns(x, m, k), spec, loss);
  REQUIRE(r);
  REQUIRE(r->grid_loss.size() == 20);
  INFO("bits " << bits << ": rtn " << r->rtn_loss << ", awq " << r->loss << " at alpha "
               << r->alpha);
  // The search must find a real alpha, and it must cut the output error by at least a third.
  CHECK(r->alpha >= 0.0);
  CHECK(r->loss < 0.67 * r->rtn_loss);
  // The outlier channels are scaled up relative to the others (protected).
  double mean_s = 0.0;
  for (float s : r->scales) mean_s += s;
  mean_s /= double(k);
  for (std::size_t c : outliers) CHECK(r->scales[c] > mean_s);

  // The reported loss is what folding and quantising give: X diag(1/s) against Q(W diag(s)).
  std::vector<float> xs = x, wsc = w;
  for (std::size_t t = 0; t < m; ++t)
    for (std::size_t c = 0; c < k; ++c) xs[t * k + c] /= r->scales[c];
  scale_input_columns(wsc, n, k, r->scales);
  std::vector<float> wq = wsc;
  REQUIRE(fake_quantize(wq, n, k, spec));
  std::vector<float> ref(m * n), got(m * n);
  matmul(w, n, k, x, m, ref, nullptr);
  matmul(wq, n, k, xs, m, got, nullptr);
  double mse = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) mse += (double(ref[i]) - got[i]) * (double(ref[i]) - got[i]);
  mse /= double(ref.size());
  CHECK(mse == Approx(r->loss).epsilon(0.02));
}

TEST_CASE("search_scales: try_identity never loses to RTN; errors are named",
          "[quant][awq_search]") {
  auto rng = test::make_rng(14);
  const std::size_t n = 16, k = 128, m = 32;
  const std::vector<float> x = test::random_floats(rng, m * k, 1.0f);  // no outliers
  const std::vector<float> w = test::random_floats(rng, n * k, 0.02f);
  LinearOutputLoss loss(x, m, w, n, k, nullptr);
  const WeightRef ws[] = {{w, n}};
  const auto xm = mean_abs_columns(x, m, k);
  auto r = search_scales(std::span<const WeightRef>(ws), k, xm, {4, 128}, loss);
  REQUIRE(r);
  CHECK(r->loss <= r->rtn_loss);
  for (double l : r->grid_loss) CHECK(r->loss <= l);

  std::vector<float> bad = xm;
  bad[9] = std::numeric_limits<float>::infinity();
  auto e = search_scales(std::span<const WeightRef>(ws), k, bad, {4, 128}, loss);
  REQUIRE_FALSE(e);
  CHECK(e.error().message.find("channel 9") != std::string::npos);
  const WeightRef short_w[] = {{std::span<const float>(w).first(k), n}};
  e = search_scales(std::span<const WeightRef>(short_w), k, xm, {4, 128}, loss);
  REQUIRE_FALSE(e);
  CHECK(e.error().message.find("linear 0") != std::string::npos);
}

TEST_CASE("search_clip lowers the partial-dot error and apply_clip clamps",
          "[quant][awq_search]") {
  auto rng = test::make_rng(15);
  const std::size_t n = 8, k = 256, m = 64;
  std::vector<float> w = test::random_floats(rng, n * k, 0.02f);
  for (std::size_t r = 0; r < n; ++r) w[r * k + (r * 37) % k] = 0.4f;  // one wide value per row
  const std::vector<float> x = test::random_floats(rng, m * k, 1.0f);
  const QuantSpec spec{4, 128};
  auto mv = search_clip(w, n, k, x, m, spec);
  REQUIRE(mv);
  REQUIRE(mv->size() == n * 2);
  std::vector<float> clipped = w;
  apply_clip(clipped, n, k, 128, *mv);
  bool any_shrunk = false;
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < k; ++c) {
      const float lim = (*mv)[r * 2 + c / 128];
      REQUIRE(std::fabs(clipped[r * k + c]) <= lim);
      any_shrunk = any_shrunk || clipped[r * k + c] != w[r * k + c];
    }
  CHECK(any_shrunk);
  std::vector<float> q_plain = w, q_clip = clipped;
  REQUIRE(fake_quantize(q_plain, n, k, spec));
  REQUIRE(fake_quantize(q_clip, n, k, spec));
  CHECK(output_mse(x, m, w, q_clip, n, k) <= output_mse(x, m, w, q_plain, n, k));

  // Same choice with the rows split over a pool.
  auto pool = ThreadPool::create(2);
  REQUIRE(pool);
  auto mv2 = search_clip(w, n, k, x, m, spec, {}, pool->get());
  REQUIRE(mv2);
  CHECK(*mv2 == *mv);

  auto e = search_clip(w, n, k, std::span<const float>(x).first(k), m, spec);
  REQUIRE_FALSE(e);
  CHECK(e.error().message.find("x: size") != std::string::npos);
}

TEST_CASE("folding scales leaves the float product unchanged", "[quant][awq_search]") {
  auto rng = test::make_rng(16);
  const std::size_t k = 128, n = 8, m = 4;
  std::vector<float> norm = test::random_floats(rng, k, 1.0f);
  std::vector<float> x = test::random_floats(rng, m * k, 1.0f);
  std::vector<float> w = test::random_floats(rng, n * k, 0.1f);
  std::vector<float> s(k);
  for (std::size_t c = 0; c < k; ++c) s[c] = 0.5f + float(c % 7);
  // y = (x * norm) W^T before; (x * norm / s) (W diag(s))^T after.
  std::vector<float> xn(m * k);
  for (std::size_t i = 0; i < m * k; ++i) xn[i] = x[i] * norm[i % k];
  std::vector<float> before(m * n), after(m * n);
  matmul(w, n, k, xn, m, before, nullptr);
  divide_by_scales(norm, s);
  scale_input_columns(w, n, k, s);
  for (std::size_t i = 0; i < m * k; ++i) xn[i] = x[i] * norm[i % k];
  matmul(w, n, k, xn, m, after, nullptr);
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(after[i] == Approx(before[i]).margin(1e-5));

  // A linear producer: its output rows (and bias) divided by s.
  std::vector<float> prev = test::random_floats(rng, k * 16, 0.1f), bias(k, 0.25f);
  const std::vector<float> prev0 = prev;
  divide_output_rows(prev, k, 16, bias, s);
  CHECK(prev[5 * 16 + 3] == Approx(prev0[5 * 16 + 3] / s[5]));
  CHECK(bias[6] == Approx(0.25f / s[6]));
}

}  // namespace test_quant_awq_search
